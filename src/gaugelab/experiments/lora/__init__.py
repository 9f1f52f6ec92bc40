"""LoRA on real text: the pretrain run, full and LoRA fine-tuning candidates, and ``inspect_lora``.

* ``data`` — What the LoRA runs and their inspection share: the corpus, the fixed validation
  batches, and the pretrain run's weights read back from the store (after the sha256 check).
* ``diagnostics`` — Logging the §0x08L factor diagnostics of an ensemble's LoRA modules during
  training.
* ``inspect`` — ``inspect_lora``: what one adapter's updates are — rank policies, truncation,
  evidence ladder.
* ``ladder`` — The evidence ladder of seed 003 §0x04M on a real model: weight, sampled-output and
  end-to-end evidence for replacing each module's update by a rank-``r`` truncation.
* ``results`` — The fine-tuning study read back from the store: candidates, learning curves,
  tables, report.
* ``run`` — LoRA on real text: pretrain, fine-tune (full and LoRA at several ranks), inspect
  adapters.
* ``sources`` — Where ``lora inspect``, ``lora compare`` and ``lora compose`` find an update: a
  PEFT adapter folder (with its base model and data when it names a pretrain run of the store), a
  candidate label of a stored study, or a run identity — every stored file read after its sha256
  check (:func:`find` resolves a name; :func:`open_store` opens the store when there is one).
* ``spec`` — The LoRA fine-tuning protocol's configuration: the pretrain run and the fine-tuning
  study.
* ``train`` — The LoRA protocol's training: the pretrain run and one fine-tuning candidate,
  resumable.
* ``views`` — Tables, figures and the HTML report of
  :func:`gaugelab.experiments.lora.run.inspect_lora`.

The public names of ``run`` are re-exported here (imported on first use).
"""

from gaugelab.lazy import lazy_face

__getattr__, __dir__ = lazy_face(__name__, "run")
