"""fairseq's own options that the training's progress reads (training/progress_meter.py), mirrored into a plugin
configuration as interpolations of fairseq's: no options of their own, nothing on the command line. The task's
configuration mirrors them for the progress; the criterion's still carries them, unused, because checkpoints
written while the criterion watched training hold them in their criterion section, which fairseq-validate merges
into the criterion's configuration (a key it lacks would be an error). Their names, without fairseq:
checkpoints/resume.py's MIRRORED_OPTIONS, which a resumed run compares where they live."""

from dataclasses import dataclass

from fairseq.dataclass import FairseqDataclass
from omegaconf import II


@dataclass
class ProgressOptions(FairseqDataclass):
    save_dir: str = II("checkpoint.save_dir")
    no_save: bool = II("checkpoint.no_save")
    max_update: int = II("optimization.max_update")
    max_epoch: int = II("optimization.max_epoch")
    stop_time_hours: float = II("optimization.stop_time_hours")
    distributed_world_size: int = II("distributed_training.distributed_world_size")
    valid_subset: str = II("dataset.valid_subset")
