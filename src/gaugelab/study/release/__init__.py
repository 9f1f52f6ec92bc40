"""Release governance of a rank study (seed 003 §0x00F–0x00K, §0x0B–0x0C): the study manifest,
the declared design, candidate selection, gates and the sealed test.

* ``attempts`` — Attempt lineage of a training unit: attempt identities, the retry rule and the
  attempt that counts (seed 003 §0x0CI).
* ``catalog`` — The failure catalog (seed 003 §0x0CB–CC): the seed's closure manifest of 36 typed
  failures, four for each mechanism loop from Loop 2 through Loop 10, in the six alarm families,
  and the failure modes this library detects beyond it.
* ``catalog_extensions`` — Failure modes gaugelab detects beyond the seed's closure manifest of 36
  (seed 003 §0x0CC).
* ``checkpoints`` — Checkpoint selection, nested inside candidate selection and on validation only.
* ``contrast`` — Paired candidate contrasts across nuisance tuples and the missing-cell policy
  (seed 003 §0x0CF–0x0CG).
* ``design`` — The experimental design of a rank study, declared before outcomes (seed 003
  §0x0CB–0x0CL).
* ``envelopes`` — Protocol envelopes: one result, one envelope (seed 003 §0x00J).
* ``evidence`` — The evidence of one candidate (seed 003 §0x0BJ): typed sub-records, each naming
  the inference it forbids, and the :class:`CandidateRecord` that joins them under one candidate
  identity without collapsing them into one number.
* ``failures`` — Typed failure records, the six alarm families and the mechanism loops (seed 003
  §0x0CB–0x0CC).
* ``manifest`` — The immutable experimental-design manifest (seed 003 §0x0CJ).
* ``manifest_ledger`` — The structural ledger of a low-rank study manifest (seed 003 §0x00K).
* ``records`` — The frozen inputs of candidate selection: the refusal type, metric declarations and
  their orientation (target gain, forgetting), and the immutable run manifest of one candidate.
* ``sealed`` — A sealed held-out test set: opened once, after the release is frozen, every access
  logged.
* ``sealed_log`` — The sealed test's records: the refusal type, the frozen release, the seal's run
  spec, and the event log's parsing into a :class:`SealStatus`.
* ``selection`` — Candidate selection: select a candidate for one release contract, not a universal
  rank.
* ``study_checks`` — The low-rank study manifest's validator (seed 003 §0x00K).
* ``study_errors`` — The named errors of the low-rank study manifest's validator (seed 003
  §0x00K).
* ``study_identity`` — Identity checks of the low-rank study manifest (seed 003 §0x00F–0x00H).
* ``study_manifest`` — The immutable low-rank study manifest: objects before results (seed 003
  §0x00F–0x00K).
* ``study_objects`` — The objects of a low-rank study manifest's five object namespaces (seed 003
  §0x00F–0x00I).
* ``units`` — The objects of an experimental design: nuisance tuples, blocks, candidate pipelines,
  training units and base-baseline records (seed 003 §0x0CE–0x0CF), with their canonical-JSON
  identities.
* ``validate`` — Fail-closed validation of candidate records before any selection (seed 003
  §0x0BU).

The public names of ``design``, ``selection``, ``sealed`` and ``study_manifest`` are re-exported
here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "design", "selection", "sealed", "study_manifest")
