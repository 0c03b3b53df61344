"""models/dropout.py, §5.4's dropout: on a CPU its own draw, against torch's F.dropout (the law, the kept values and
gradients bit for bit, the seeded stream's reproducibility); off training, at p = 0, p = 1 and on other devices,
torch's own."""

import pytest
import torch
import torch.nn.functional as F

from vaswani_plugin.models.dropout import apply_dropout

VALUES = 1_000_000  # the dropped share within 5 standard deviations: sqrt(p (1 - p) / VALUES) is 3e-4 at p = 0.1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("p", [0.1, 0.3])
def test_a_cpu_draw_drops_p_of_the_values_and_keeps_the_rest_as_torchs_dropout_does(p, dtype):
    torch.manual_seed(0)
    x = torch.randn(1000, VALUES // 1000).to(dtype).requires_grad_()
    out = apply_dropout(x, p, True)
    kept = out != 0
    assert abs((1 - kept.double().mean()).item() - p) < 5 * (p * (1 - p) / VALUES) ** 0.5
    reference = F.dropout(x, p, True)
    both = kept & (reference != 0)
    assert both.sum() > 0.9 * (1 - p) ** 2 * VALUES  # kept by both draws
    assert torch.equal(out[both], reference[both])  # the scale as torch's CPU dropout applies it, in x's dtype
    upstream = torch.randn(x.shape).to(dtype)
    (gradient,) = torch.autograd.grad(out, x, upstream)
    (expected,) = torch.autograd.grad(reference, x, upstream)
    assert torch.equal(gradient[both], expected[both]) and not gradient[~kept].any()


def test_the_draw_follows_torchs_seed_and_leaves_x_alone_off_training():
    x = torch.randn(64, 32)
    torch.manual_seed(5)
    first = apply_dropout(x, 0.1, True)
    torch.manual_seed(5)
    assert torch.equal(apply_dropout(x, 0.1, True), first) and not torch.equal(first, x)
    assert apply_dropout(x, 0.1, False) is x and apply_dropout(x, 0.0, True) is x
    assert torch.equal(apply_dropout(x, 1.0, True), torch.zeros_like(x))
