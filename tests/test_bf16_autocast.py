"""--bf16-autocast of the vaswani_translation task: the forward pass under torch.autocast in bfloat16 (on this
CPU), weights, loss and gradients in float32, and the same loss and gradients as float32 within bfloat16's
precision."""

import pytest
import torch
from fairseq.optim.amp_optimizer import AMPOptimizer

from conftest import build_model, make_dictionary, random_tokens
from vaswani_plugin import VaswaniConfigError
from vaswani_plugin.criterions.vaswani_label_smoothed_cross_entropy import VaswaniLabelSmoothedCrossEntropy
from vaswani_plugin.tasks.vaswani_translation import VaswaniTranslationConfig, VaswaniTranslationTask


class PlainOptimizer:
    """The one method of fairseq's optimizer wrappers that train_step calls."""

    def backward(self, loss):
        loss.backward()


def training_step(bf16_autocast, optimizer=None):
    """One train_step of the task on a tiny model (no dropout, so both precisions see the same function).
    Returns the loss, the gradients by name, the parameters' dtypes and the dtypes the linear layers output."""
    dictionary = make_dictionary(20)
    torch.manual_seed(0)
    model = build_model(dictionary, dropout=0.0)
    task = VaswaniTranslationTask(VaswaniTranslationConfig(bf16_autocast=bf16_autocast), dictionary, dictionary)
    criterion = VaswaniLabelSmoothedCrossEntropy(task, label_smoothing=0.1, sentence_avg=False)
    generator = torch.Generator().manual_seed(0)
    source = random_tokens(dictionary, 4, 7, generator, left_pad=True, lengths=[7, 5, 6, 3])
    target = random_tokens(dictionary, 4, 6, generator, lengths=[6, 2, 4, 5])
    sample = {"net_input": {"src_tokens": source, "src_lengths": source.ne(dictionary.pad()).sum(1),
                            "prev_output_tokens": torch.roll(target, 1, dims=1)},
              "target": target, "ntokens": int(target.ne(dictionary.pad()).sum())}
    outputs = set()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda _module, _inputs, output: outputs.add(output.dtype))
    loss, _, _ = task.train_step(sample, model, criterion, optimizer or PlainOptimizer(), update_num=1)
    gradients = {name: parameter.grad for name, parameter in model.named_parameters()}
    return loss, gradients, {parameter.dtype for parameter in model.parameters()}, outputs


def test_products_run_in_bfloat16_and_the_rest_stays_float32():
    loss, gradients, parameters, outputs = training_step(bf16_autocast=True)
    assert outputs == {torch.bfloat16}
    assert loss.dtype == torch.float32 and parameters == {torch.float32}
    assert all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in gradients.values())


def test_loss_and_gradients_match_float32_within_bfloat16_precision():
    loss32, gradients32, _, outputs32 = training_step(bf16_autocast=False)
    loss16, gradients16, _, _ = training_step(bf16_autocast=True)
    assert outputs32 == {torch.float32}  # without the option, the task trains as fairseq's translation does
    assert loss16.item() == pytest.approx(loss32.item(), rel=2e-3)
    flat32 = torch.cat([gradients32[name].flatten() for name in sorted(gradients32)])
    flat16 = torch.cat([gradients16[name].flatten() for name in sorted(gradients16)])
    assert torch.nn.functional.cosine_similarity(flat16, flat32, dim=0) > 0.99
    assert (flat16 - flat32).norm() < 0.05 * flat32.norm()


def test_with_fairseqs_own_mixed_precision_it_is_a_one_line_error():
    with pytest.raises(VaswaniConfigError, match="--bf16-autocast is a precision of its own: drop --fp16, --amp"):
        training_step(bf16_autocast=True, optimizer=AMPOptimizer.__new__(AMPOptimizer))
