"""Skill evals: the task set generated from the code, the agent harness, scoring and the benchmark page.

Modules (all light; the dataset templates import the packing code only while building):

* ``tasks`` - task format, loading, agentskills.io export; ``checks`` - required/forbidden checks;
* ``dataset`` (+ ``templates_*``, ``facts``, ``capture``, ``render``) - builds ``evals/``;
* ``runner`` - ``seqpack eval run``; ``transcript`` - parsing agent output;
* ``security``, ``signals``, ``scoring``, ``judge`` - ``seqpack eval score``;
* ``report`` - ``seqpack eval report``.

See ``docs/evals.md``.
"""
