"""The matrix-sensing experiments: the optimizer zoo (docs/protocols.md §3) and the Adam-p dial
(§4).

* ``convex`` — The convex reference row of the zoo: minimum nuclear norm subject to the
  measurements.
* ``dial`` — The Adam-p dial: recovery and effective rank as Adam's denominator is pooled toward a
  scalar.
* ``figures`` — Figures of the zoo and the dial: one colour per rule, arm or reference line
  throughout.
* ``grids`` — The zoo's learning-rate grids: four half-decade rates per rule (ours).
* ``problem`` — The batched matrix-sensing task the sensing experiments share: the protocol's
  fields, every seed's instance stacked for one ensemble, and the mean over seeds their tables and
  figures show (:func:`finite_mean`).
* ``rates`` — The protocol's learning-rate selection: one rate per rule from its (seed × rate)
  grid.
* ``records`` — A rule's result: what one (seed × rate) ensemble did, recorded in the store and
  read back.
* ``results`` — The sensing studies read back: the zoo's rows (:class:`ZooRow`, :class:`ZooResult`)
  and the dial's points (:class:`DialPoint`, :class:`DialResult`), each at the rate the protocol's
  selection rule picks.
* ``spec`` — The sensing experiments' configurations: :class:`ZooSpec` (the optimizer zoo,
  docs/protocols.md §3) and :class:`DialSpec` (the Adam-p dial, §4), each one run per rule or p of
  the study, trained by :func:`~gaugelab.experiments.sensing.train.train_rule`.
* ``split`` — The zoo's split: worst orthogonally equivariant rule against best coordinatewise
  rule.
* ``train`` — The sensing training loop: one rule's (seed × rate) ensemble to its stopping rule,
  resumable.
* ``views`` — Tables and HTML reports of the zoo and the dial (through
  ``gaugelab.study.report.builder``).
* ``zoo`` — The matrix-sensing optimizer zoo: every rule on the docs/protocols.md §3 testbed, one
  table."""
