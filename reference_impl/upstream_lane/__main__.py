"""``python -m reference_impl.upstream_lane``: build or check the upstream lane."""

import sys

from reference_impl.upstream_lane.build import main

sys.exit(main())
