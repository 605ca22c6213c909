"""Skill evals: the task set generated from the code, the agent harness, scoring and the benchmark page.

Modules (all light; the dataset templates import the packing code only while building):

* ``tasks`` - task format, loading, agentskills.io export; ``fields`` - answer fields;
  ``answers`` - reading an answer (block and free text) and grading each field, forbidden claims;
* ``dataset`` (+ ``builder``, ``templates_*``, ``facts``, ``claims``, ``vocab``, ``upstream``,
  ``capture``, ``render``) - builds ``evals/``;
* ``runner`` - ``seqpack eval run``; ``transcript`` - parsing agent output and tool results;
  ``agents`` - the oracle and null reference agents;
* ``security``, ``signals``, ``scoring``, ``judge`` - ``seqpack eval score``;
* ``adversarial`` - ``seqpack eval adversarial``; ``report`` - ``seqpack eval report``.

See ``docs/evals.md``.
"""
