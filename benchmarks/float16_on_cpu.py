"""fairseq's own --fp16 and --amp on a CPU: host_cost.py's CPU runs and the tests' fairseq-train
(tests/fp16_on_cpu.py). It imports torch alone, nothing of the plugin, so that fairseq's --user-dir still imports
and registers the plugin."""


def float16_on_cpu():
    """fairseq's own --fp16 and --amp (FP16Optimizer, AMPOptimizer) on a CPU: the two places where fairseq's
    float16 path assumes CUDA, patched in this process only (nothing of fairseq changes on disk).

    - FP16Optimizer keys its flat float32 master weights by torch.cuda.current_device() and later copies the
      float16 gradients into them grouped by p.device.index, which is None on a CPU: current_device() answers None
      here, so the keys match. (With any other key the copy finds no parameters and every update has all-zero
      gradients.)
    - On a gradient overflow the trainer sets grad_norm = torch.tensor(0.0).cuda(): .cuda() leaves a tensor on the
      CPU.
    """
    import torch

    torch.cuda.current_device = lambda: None
    torch.Tensor.cuda = lambda tensor, *args, **kwargs: tensor
