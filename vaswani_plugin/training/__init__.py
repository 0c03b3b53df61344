"""What runs inside fairseq-train beside the model: the training-time hooks that the task (tasks/vaswani_translation.py)
attaches to a training, and nothing else attaches. progress_meter.py (the ETA, dev lines and records of progress.py,
written on rank 0 from the values fairseq logs), watchdog.py (a rank that stops answering ends the run), preemption.py
(a signal stops every rank after the same update) and stopping.py (a divergence or a full disk ends training in one
line, with the marker the recipes read). The models and the criterion import none of them; tools/ reads what they
write (progress.py's readers) once a run has trained."""
