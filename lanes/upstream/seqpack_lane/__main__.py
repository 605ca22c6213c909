"""``python -m seqpack_lane``: build or check the upstream lane."""

import sys

from seqpack_lane.build import main

sys.exit(main())
