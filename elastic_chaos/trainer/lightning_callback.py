"""PyTorch Lightning: report steps and checkpoint saves/restores through elastic_chaos.trainer.progress.

Add one callback to a Lightning ``Trainer`` and the toolkit sees what the
reference trainer reports: every optimizer step (``global_step``, epoch),
every checkpoint write (started/saved, timed around the actual write, rank 0
only as Lightning writes there), and the step a restarted worker restored
(``checkpoint_loaded``; step 0 on a fresh start)::

    from elastic_chaos.trainer.lightning_callback import ElasticChaosCallback
    trainer = L.Trainer(..., callbacks=[ModelCheckpoint(...), ElasticChaosCallback()])

Saves are seen by wrapping the strategy's ``CheckpointIO`` (Lightning's public
plugin interface) when the trainer is set up, so ModelCheckpoint, a manual
``trainer.save_checkpoint`` and any custom CheckpointIO are all reported.
Importing this module needs ``lightning`` (``pip install lightning``, or the
``lightning`` extra); nothing else in ``trainer`` does.
"""
from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.fabric.plugins import CheckpointIO

from elastic_chaos.trainer import progress


class ReportingCheckpointIO(CheckpointIO):
    """Wraps another CheckpointIO: reports each save around the write it delegates."""

    def __init__(self, inner: CheckpointIO) -> None:
        self.inner = inner

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        step = int(checkpoint.get("global_step", 0))
        progress.report_checkpoint_started(step, str(path), reason="lightning")
        self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)
        progress.report_checkpoint_saved(step, str(path), reason="lightning")

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        loaded: dict[str, Any] = self.inner.load_checkpoint(path, *args, **kwargs)
        return loaded

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


class ElasticChaosCallback(pl.Callback):
    """Reports Lightning's training progress and checkpoints as elastic_chaos.trainer.progress lines."""

    def __init__(self) -> None:
        self._restored: int | None = None
        self._last_step = -1

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        progress.report_start(framework="lightning", stage=stage)
        io = trainer.strategy.checkpoint_io
        if not isinstance(io, ReportingCheckpointIO):
            trainer.strategy.checkpoint_io = ReportingCheckpointIO(io)

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        self._restored = int(checkpoint.get("global_step", 0))
        path = trainer.ckpt_path
        progress.report_checkpoint_loaded(self._restored, str(path) if path else None, reason="lightning")

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._restored is None:  # nothing was restored: a fresh start
            progress.report_checkpoint_loaded(0, None, reason="lightning")
        self._last_step = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if step == self._last_step:  # gradient accumulation: no optimizer step in this batch
            return
        self._last_step = step
        extra: dict[str, Any] = {}
        loss = _loss(outputs)
        if loss is not None:
            extra["loss"] = loss
        progress.report_step(step, epoch=trainer.current_epoch, **extra)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        progress.emit("finished", step=trainer.global_step)


def _loss(outputs: Any) -> float | None:
    value: Any = outputs.get("loss") if isinstance(outputs, dict) else outputs
    try:
        return round(float(value.item()), 6)
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None
