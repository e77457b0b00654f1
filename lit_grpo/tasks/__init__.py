"""Tasks: the papers lit_grpo reproduces, each a package that plugs into the core through its registries.

- :mod:`lit_grpo.tasks.visualsphinx`: the VisualSphinx reader, the embedded puzzle generator, the binary reward;
- :mod:`lit_grpo.tasks.phyx`: the physical-reasoning paper on PhyX (reader, generators, rewards, judge, units,
  experiments);
- :mod:`lit_grpo.tasks.attention`: that paper's attention reward (the ASM) and its analysis;
- :mod:`lit_grpo.tasks.demo`: the offline demo's tiny model (the ``policy.embedded`` option group).

:mod:`lit_grpo.tasks.table` (a module, not a task) is the accuracy table the tasks' configs write at ``test``.
"""
