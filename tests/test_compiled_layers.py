"""--compile-layers of the vaswani_translation task (models/compiled_layers.py): training steps of a tiny model with
its layers under torch.compile (inductor, dynamic=True) give eager's loss and gradients on two batch shapes, with
the same state_dict keys, and on a batch padded by --length-buckets; eval passes and beam search stay eager; the
compile time is logged once; dropout breaks no graph; reduce-overhead is refused on a CPU. Dropout is off where
steps are compared: compiled dropout draws other random numbers than eager's."""

import copy
import logging
import re
from argparse import Namespace

import pytest
import torch
from cli_helpers import REPO, TINY_MODEL
from conftest import make_dictionary, random_tokens
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from torch._dynamo.utils import counters

from vaswani_plugin import VaswaniConfigError
from vaswani_plugin.models.compiled_layers import TIMED_STEPS, compile_layers
from vaswani_plugin.tasks.vaswani_translation import VaswaniTranslationTask

# float32, summed in another order: inductor fuses the layer norms, softmax and sums of the backward pass, which
# moves the last bits (7e-8 at most here, vectorised or not); any change of the function itself (an output scaled
# by 1 + 1e-3) is far outside.
TOLERANCE = dict(rtol=1e-4, atol=1e-5)
DICTIONARY = make_dictionary(20)


class PlainOptimizer:
    """The one method of fairseq's optimizer wrappers that train_step calls."""

    def backward(self, loss):
        loss.backward()


def training_setup(*arguments):
    """(task, model, criterion) as fairseq-train builds them from its command line: TINY_MODEL, no dropout."""
    command = ["data-bin", "--user-dir", str(REPO / "vaswani_plugin"), "--task", "vaswani_translation"]
    command += ["--arch", "vaswani_transformer", *TINY_MODEL, "--dropout", "0", "--label-smoothing", "0.1"]
    command += ["--criterion", "vaswani_label_smoothed_cross_entropy", *arguments]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), command))
    task = VaswaniTranslationTask(cfg.task, DICTIONARY, DICTIONARY)
    torch.manual_seed(0)
    return task, task.build_model(cfg.model), task.build_criterion(cfg.criterion)


def batch(seed, source_lengths, target_lengths):
    """A fairseq batch: sources left-padded, targets right-padded, prev_output_tokens as fairseq collates them."""
    generator = torch.Generator().manual_seed(seed)
    rows = len(source_lengths)
    source = random_tokens(DICTIONARY, rows, max(source_lengths), generator, source_lengths, left_pad=True)
    target = random_tokens(DICTIONARY, rows, max(target_lengths), generator, target_lengths)
    prev = torch.cat([torch.full((rows, 1), DICTIONARY.eos()), target[:, :-1]], dim=1)
    prev[target.eq(DICTIONARY.pad())] = DICTIONARY.pad()
    net_input = {"src_tokens": source, "src_lengths": source.ne(DICTIONARY.pad()).sum(1), "prev_output_tokens": prev}
    return {
        "id": torch.arange(rows),
        "net_input": net_input,
        "target": target,
        "ntokens": int(target.ne(DICTIONARY.pad()).sum()),
    }


BATCHES = [batch(1, [7, 5, 6, 3], [6, 2, 4, 5]), batch(2, [9, 4, 8], [3, 5, 2])]  # two shapes: (4, 7/6), (3, 9/5)


def step(task, model, criterion, sample):
    """One train_step; (loss, every parameter's gradient by name)."""
    model.zero_grad(set_to_none=True)
    loss, _, _ = task.train_step(sample, model, criterion, PlainOptimizer(), update_num=0)
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def assert_same_step(compiled, eager):
    """Two steps' (loss, gradients) equal within TOLERANCE, the same parameters having gradients."""
    torch.testing.assert_close(compiled[0], eager[0], **TOLERANCE)
    assert compiled[1].keys() == eager[1].keys()
    for name, gradient in compiled[1].items():
        torch.testing.assert_close(gradient, eager[1][name], **TOLERANCE, msg=name)


def graphs():
    """How many graphs dynamo has compiled in this process."""
    return counters["stats"]["unique_graphs"]


def test_the_option_is_off_unless_asked():
    assert training_setup()[0].cfg.compile_layers == "off"
    assert training_setup("--compile-layers", "dynamic")[0].cfg.compile_layers == "dynamic"


def test_compiled_steps_have_eager_losses_gradients_and_keys():
    """Both batches: the loss and every gradient as eager's; the second shape compiles nothing new (dynamic=True);
    the state_dict's keys unchanged, and an eager model's state loads."""
    task, model, criterion = training_setup("--compile-layers", "dynamic")
    eager_task, eager, _ = training_setup()
    eager.load_state_dict(model.state_dict())
    keys = list(model.state_dict())
    for index, sample in enumerate(BATCHES):
        before = graphs()
        loss, gradients = step(task, model, criterion, sample)
        if index == 1:
            assert graphs() == before, "the second batch shape was compiled again"
        assert_same_step((loss, gradients), step(eager_task, eager, criterion, sample))
        assert len(gradients) == len(keys)
    assert list(model.state_dict()) == keys
    assert not any("_orig_mod" in name for name, _ in model.named_parameters())
    model.load_state_dict(eager.state_dict())
    copied = copy.deepcopy(model).encoder.layers[0]  # an EMA model's copy: its forward is its own
    assert copied.forward.__self__ is copied


def test_eval_passes_and_beam_search_stay_eager():
    """After compiled training steps, a validation's forward pass and beam search (incremental state) give eager's
    outputs exactly and compile nothing."""
    task, model, criterion = training_setup("--compile-layers", "dynamic")
    eager = copy.deepcopy(model)
    step(task, model, criterion, BATCHES[0])
    before = graphs()
    with torch.no_grad():
        for net in (model, eager):
            net.eval()
        outputs = [net(**BATCHES[1]["net_input"])[0] for net in (model, eager)]
        torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=0)
        generators = [task.build_generator([net], Namespace(beam=2, max_len_b=8)) for net in (model, eager)]
        hypotheses = [task.inference_step(g, [net], BATCHES[1]) for g, net in zip(generators, (model, eager))]
    assert [[h["tokens"].tolist() for h in sentence] for sentence in hypotheses[0]] == [
        [h["tokens"].tolist() for h in sentence] for sentence in hypotheses[1]
    ]
    assert graphs() == before, "an eval pass was compiled"


def test_the_compile_time_is_logged_once(caplog):
    caplog.set_level(logging.INFO, logger="vaswani_plugin.models.compiled_layers")
    task, model, criterion = training_setup("--compile-layers", "dynamic")
    for index in range(TIMED_STEPS + 3):
        step(task, model, criterion, BATCHES[index % 2])
    lines = [record.getMessage() for record in caplog.records if record.name == "vaswani_plugin.models.compiled_layers"]
    assert len(lines) == 1, lines
    assert lines[0].startswith("compile-layers dynamic: 3 layers compiled; the first training step took ")
    assert f"(compilation), the next {TIMED_STEPS} took " in lines[0]


def test_each_layer_is_one_graph_with_the_papers_dropout():
    """dynamo traces each training layer's forward whole with dropout 0.1 (the CPU's eager dropout draws with an
    in-place random_(), which it cannot trace: each dropout split the graph, up to its recompile limit). Traced
    without compiling (torch._dynamo.explain), on the arguments an eager step gives the first layer of each kind."""
    task, model, criterion = training_setup(
        "--dropout", "0.1", "--attention-dropout", "0.1", "--activation-dropout", "0.1"
    )
    layers, calls = [model.encoder.layers[0], model.decoder.layers[0]], {}
    for layer in layers:
        layer.register_forward_pre_hook(
            lambda layer, args, kwargs: calls.setdefault(layer, (args, kwargs)), with_kwargs=True
        )
    step(task, model, criterion, BATCHES[0])
    for layer in layers:
        args, kwargs = calls[layer]
        explained = torch._dynamo.explain(type(layer).forward)(layer, *args, **kwargs)
        assert explained.graph_break_count == 0, [str(reason) for reason in explained.break_reasons]
        assert explained.graph_count == 1


@pytest.mark.parametrize(
    "setting, message",
    [
        (
            "reduce-overhead",
            "--compile-layers reduce-overhead records CUDA graphs: it needs a GPU, this model is on cpu",
        ),
        ("dynamc", "--compile-layers dynamc: choose one of off, dynamic, reduce-overhead"),
    ],
)
def test_reduce_overhead_on_a_cpu_and_a_bad_value_are_one_line_errors(setting, message):
    task, model, criterion = training_setup("--compile-layers", setting)
    with pytest.raises(VaswaniConfigError, match=re.escape(message)) as error:
        step(task, model, criterion, BATCHES[0])
    assert "\n" not in str(error.value)
    assert model.encoder.layers[0].forward.__func__ is type(model.encoder.layers[0]).forward


def test_length_buckets_compiled_give_the_unpadded_eager_step():
    """--length-buckets 4 under --compile-layers dynamic: the first batch, padded from 4 rows x 7 (source) and 6
    (target) to 8 x 12 and 12 (tasks/length_buckets.py), gives the unpadded eager step's loss and gradients."""
    task, model, criterion = training_setup("--compile-layers", "dynamic", "--length-buckets", "4", "--max-tokens=40")
    eager_task, eager, _ = training_setup()
    eager.load_state_dict(model.state_dict())
    assert task.length_buckets().shape(4, 7, 6) == (8, 12, 12)
    assert_same_step(step(task, model, criterion, BATCHES[0]), step(eager_task, eager, criterion, BATCHES[0]))


def test_a_model_without_the_plugins_layers_is_a_one_line_error():
    with pytest.raises(VaswaniConfigError, match="compiles the layers of a vaswani_transformer: this model has none"):
        compile_layers(torch.nn.Linear(2, 2), "dynamic")
