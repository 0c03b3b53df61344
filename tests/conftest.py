"""Shared helpers: tiny dictionaries and models built through the plugin's own config and build_model."""

import os
import signal

# One thread per process, here and in every command the tests start: the second lane's recipe runs and the tests
# in the foreground share CI's 2 cores, and OpenMP threads that outnumber the cores spin instead of working (the
# suite took 15 minutes so, 9 on one thread each).
os.environ["OMP_NUM_THREADS"] = "1"
# inductor's C++ kernels without SIMD, in the test process and every command it starts (--compile-layers: its tests
# and the GPU acceptance's CPU stand-in): the same graphs, lowering and fusions (a GPU's kernels are Triton's either
# way) in about two thirds of the CPU time (a stand-in's compiled lever run: 21 CPU-s against 32, cold cache).
os.environ["TORCHINDUCTOR_VEC_ISA_OK"] = "0"
# Their Python processes import scikit-learn and scipy.stats, which fairseq imports as it starts and no test uses, only
# at a first use (tests/startup/sitecustomize.py: 1.3 of the 4-5 CPU seconds of a fairseq process's start).
STARTUP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "startup")
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [STARTUP, os.environ.get("PYTHONPATH")]))
# A suite started in the background by a shell without job control (`nohup bash .ci/run &`) inherits SIGINT ignored,
# and so would every process it starts, where the Ctrl-C tests need it (test_preemption.py): Python's own handler
# instead, which a started program sees as the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import shlex  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from concurrent.futures import Future, ThreadPoolExecutor  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from fairseq.data import Dictionary  # noqa: E402

torch.set_num_threads(1)

import cli_helpers  # noqa: E402  (SHARED_DATA read at collection, so that a test run can point it elsewhere)
import doc_blocks  # noqa: E402
from cli_helpers import TEST_SENTENCES, TINY_MODEL, run, write_reversal_corpus  # noqa: E402

import vaswani_plugin  # noqa: E402
from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerConfig, VaswaniTransformerModel  # noqa: E402

vaswani_plugin.register()  # the plugin's components, as --user-dir registers them

TINY_SIZES = dict(
    encoder_embed_dim=32,
    decoder_embed_dim=32,
    encoder_ffn_embed_dim=64,
    decoder_ffn_embed_dim=64,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
)


def make_dictionary(symbols: int) -> Dictionary:
    """fairseq's dictionary: <s>, <pad>, </s>, <unk> and `symbols` words w0, w1, ..."""
    dictionary = Dictionary()
    for index in range(symbols):
        dictionary.add_symbol(f"w{index}")
    return dictionary


def build_model(dictionary=None, target_dictionary=None, **options) -> VaswaniTransformerModel:
    """A vaswani_transformer built as fairseq builds it; options override TINY_SIZES and the defaults."""
    dictionary = dictionary or make_dictionary(20)
    cfg = VaswaniTransformerConfig(**{**TINY_SIZES, **options})
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=target_dictionary or dictionary)
    return VaswaniTransformerModel.build_model(cfg, task)


def random_tokens(dictionary, batch, length, generator=None, lengths=None, left_pad=False):
    """Random word tokens ending in </s>, padded to `length` (on the right unless left_pad)."""
    lengths = lengths or [length] * batch
    tokens = torch.full((batch, length), dictionary.pad(), dtype=torch.long)
    for row, n in enumerate(lengths):
        words = torch.randint(dictionary.nspecial, len(dictionary), (n,), generator=generator)
        words[-1] = dictionary.eos()
        if left_pad:
            tokens[row, length - n :] = words
        else:
            tokens[row, :n] = words
    return tokens


@pytest.fixture
def dictionary():
    return make_dictionary(20)


@pytest.fixture(scope="session")
def reversal_data(tmp_path_factory):
    return reversal_corpus(tmp_path_factory)


_REVERSAL_CORPUS = []
_REVERSAL_CORPUS_LOCK = threading.Lock()


def reversal_corpus(tmp_path_factory):
    """A tiny corpus binarised twice: with a joined dictionary and with separate ones. Made once a session, by the
    first lane to ask (the other waits for it; two fairseq-preprocess runs of 4-5 s each), then only read."""
    with _REVERSAL_CORPUS_LOCK:
        if not _REVERSAL_CORPUS:
            root = tmp_path_factory.mktemp("corpus")
            write_reversal_corpus(root, {"train": 300, "valid": 101, "test": TEST_SENTENCES})
            common = [
                "--source-lang",
                "src",
                "--target-lang",
                "tgt",
                "--trainpref",
                root / "train",
                "--validpref",
                root / "valid",
                "--testpref",
                root / "test",
                "--workers",
                "1",
            ]
            run("preprocess", *common, "--joined-dictionary", "--destdir", root / "joined", cwd=root)
            run("preprocess", *common, "--destdir", root / "separate", cwd=root)
            _REVERSAL_CORPUS.append(root)
        return _REVERSAL_CORPUS[0]


# The README's own-pipeline training made tiny as a user would: its counts changed, arguments appended (the last
# one counts).
OWN_PIPELINE_COUNTS = {
    "--max-update 100000": "--max-update 6",
    "--save-interval-updates 1000": "--save-interval-updates 2",
}
OWN_PIPELINE_TINY = [
    *TINY_MODEL,
    "--max-tokens",
    "1000",
    "--cpu",
    "--seed",
    "1",
    "--log-format",
    "json",
    "--log-interval",
    "1",
]


@pytest.fixture(scope="session")
def reversal_training(reversal_data, tmp_path_factory):
    """The README's own-pipeline fairseq-train (the plugin's three names, Adam, eq. 3, §5.4) as written, on the
    reversal corpus, in a folder of its own (its checkpoints/ relative to it): (the checkpoints' folder, log)."""
    train = doc_blocks.commands(doc_blocks.block("README.md", "test:own-pipeline"))[0]
    folder = tmp_path_factory.mktemp("own_pipeline")
    command = doc_blocks.substituted(
        train,
        {
            "fairseq-train DATA": f"fairseq-train {reversal_data / 'joined'}",
            '"$(python -m vaswani_plugin)"': cli_helpers.plugin_dir(),
            **OWN_PIPELINE_COUNTS,
        },
    )
    result = doc_blocks.run_shell(f"{command} {shlex.join(OWN_PIPELINE_TINY)}", folder)
    assert result.returncode == 0, result.stderr[-3000:]
    return folder / "checkpoints", result.stdout + result.stderr


@pytest.fixture(scope="session")
def training_plan(reversal_data, reversal_training):
    """A recipe's plan line for the training that wrote reversal_training's checkpoints: the README's command with
    the fixture's counts and sizes, as `python -m fairseq_cli.train`, and their folder as --save-dir."""
    save_dir, _ = reversal_training
    train = doc_blocks.commands(doc_blocks.block("README.md", "test:own-pipeline"))[0]
    train = doc_blocks.substituted(
        train,
        {
            "fairseq-train DATA": f"python -m fairseq_cli.train {reversal_data / 'joined'}",
            '"$(python -m vaswani_plugin)"': cli_helpers.plugin_dir(),
            **OWN_PIPELINE_COUNTS,
        },
    )
    return f"{train} {shlex.join(OWN_PIPELINE_TINY)} --save-dir {save_dir}"


@pytest.fixture(scope="session")
def trained(reversal_data, reversal_training, tmp_path_factory):
    """(checkpoint, data-bin, test sources as word lists): the reversal model trained 500 more updates (Adam,
    cross-entropy, all 300 training pairs a batch) so that it translates, saved as a checkpoint fairseq's tools
    read; for the exports' tests. After 120 updates it was unsure enough that an AVX2-only CPU's rounding flipped
    near-ties between torch and CTranslate2."""
    from fairseq import checkpoint_utils
    from fairseq.data import data_utils

    from vaswani_plugin.checkpoints.storage import load_checkpoint

    save_dir, _ = reversal_training
    data = reversal_data / "joined"
    checkpoint = load_checkpoint(save_dir / "checkpoint_last.pt")
    (model,), _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(save_dir / "checkpoint_last.pt")], arg_overrides={"data": str(data)}
    )
    dictionary = task.source_dictionary

    def tokens(split, side):
        lines = (reversal_data / f"{split}.{side}").read_text().splitlines()
        return [torch.tensor([dictionary.index(word) for word in line.split()] + [dictionary.eos()]) for line in lines]

    sources, targets = tokens("train", "src"), tokens("train", "tgt")
    sample = {
        "net_input": {
            "src_tokens": data_utils.collate_tokens(sources, dictionary.pad(), left_pad=True),
            "src_lengths": torch.tensor([len(t) for t in sources]),
            "prev_output_tokens": data_utils.collate_tokens(
                targets, dictionary.pad(), dictionary.eos(), move_eos_to_beginning=True
            ),
        },
        "target": data_utils.collate_tokens(targets, dictionary.pad()),
    }
    train_with_cross_entropy(model, lambda step: sample, 500, lr=1e-2, pad=dictionary.pad())
    checkpoint["model"] = model.state_dict()
    path = tmp_path_factory.mktemp("trained") / "checkpoint.pt"
    torch.save(checkpoint, path)
    test_sources = [line.split() for line in (reversal_data / "test.src").read_text().splitlines()]
    return path, data, test_sources


def train_with_cross_entropy(model, sample_at, updates: int, lr: float, pad: int) -> None:
    """`updates` updates of Adam on the cross-entropy of sample_at(step) (a fairseq batch), in this process."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for step in range(updates):
        sample = sample_at(step)
        logits, _ = model(**sample["net_input"])
        loss = F.cross_entropy(logits.flatten(0, 1), sample["target"].flatten(), ignore_index=pad)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


LANE_JOBS = {}


def lane_job(function):
    """Make FUNCTION(tmp_path_factory, lane) a job of the second lane, under its name. A test that checks its
    result is marked @pytest.mark.lane(name, ...) (the jobs it needs, in the order they must run) and reads it
    with lane[name].result(); a job can read other jobs in the same way (one nobody has started runs there)."""
    LANE_JOBS[function.__name__] = function
    return function


def pytest_configure(config):
    config.addinivalue_line("markers", "lane(*jobs): the test checks these jobs of the second lane (conftest.py)")
    config.addinivalue_line(
        "markers",
        "e2e: an end-to-end run (a whole recipe, fairseq's command lines on real "
        "data); needs ../shared/data, skipped where it is absent (-m 'not e2e' "
        "leaves them out)",
    )
    config.addinivalue_line("markers", "shared_data: reads ../shared/data; skipped where it is absent")


NO_SHARED_DATA = "../shared/data is absent: the end-to-end data (see ../shared/data/README.md)"


def pytest_collection_modifyitems(config, items):
    """The tests that check jobs of the second lane run after the others, in their order, so that the foreground
    works while the lane runs instead of waiting for it. Without ../shared/data, the tests marked e2e or
    shared_data are skipped, saying why (before the second lane starts: it leaves their jobs out)."""
    items.sort(key=lambda item: item.get_closest_marker("lane") is not None)  # stable: each part keeps its order
    if cli_helpers.SHARED_DATA.is_dir():
        return
    for item in items:
        if item.get_closest_marker("e2e") or item.get_closest_marker("shared_data"):
            item.add_marker(pytest.mark.skip(reason=NO_SHARED_DATA))


def _skipped(item) -> bool:
    """Skipped whatever happens: a skip mark (pytest_collection_modifyitems' among them) or skipif(True)."""
    if item.get_closest_marker("skip") is not None:
        return True
    return any(
        (marker.args[0] if marker.args else marker.kwargs.get("condition")) is True
        for marker in item.iter_markers("skipif")
    )


@pytest.fixture(scope="session", autouse=True)
def lane(request, tmp_path_factory):
    """The second lane: a thread that runs, from the start of the session, the slow jobs (whole recipe runs) marked
    on the selected tests. A recipe run is mostly Python start-up on one core (importing fairseq takes 3.5 s), so
    beside the tests in the foreground it costs almost no wall time on CI's 2 cores; the suite would take minutes
    longer with them one after another. The lane takes the jobs from the last test's end, and the foreground reads
    them from the first test's; a job that nobody has started, whoever reads it runs it, and the lane then skips
    it. So the two meet and end together, whichever is the longer on a VM."""
    groups = [
        list(marker.args)
        for item in request.session.items
        if not _skipped(item)
        for marker in item.iter_markers("lane")
    ]
    wanted = []
    for group in reversed(groups):  # the last tests' jobs first, each test's in the order it names them
        wanted += [name for name in group if name not in wanted]
    futures = {}
    # pytest makes its temporary folder on first use; made here first, so the two lanes never race to make it.
    tmp_path_factory.getbasetemp()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="second-lane")
    for name in wanted:
        futures[name] = _Job(name, pool, (tmp_path_factory, futures))
    yield futures
    pool.shutdown(cancel_futures=True)  # jobs of tests that never ran (-x, Ctrl-C) are dropped


LANE_SECONDS = {}
FOREGROUND_SECONDS = {}  # the jobs the foreground ran itself
FOREGROUND_WAITS = {}


class _Job:
    """A job of the second lane, queued there. result() runs it at once, in the thread that asks, if nobody has
    started it (a job may read one after it in the queue), and otherwise waits for it: from the foreground, counted."""

    def __init__(self, name, pool, args):
        self.name, self.args, self.lock = name, args, threading.Lock()
        self.future = pool.submit(_timed, LANE_SECONDS, name, *args)

    def result(self):
        foreground = threading.current_thread() is threading.main_thread()
        with self.lock:
            here = self.future.cancel()  # not started: the lane will skip it
            if here:
                self.future = Future()
            future = self.future
        if here:
            try:
                done = _timed(FOREGROUND_SECONDS if foreground else LANE_SECONDS, self.name, *self.args)
            except BaseException as error:  # every later reader gets it too, as from the lane
                future.set_exception(error)
                raise
            future.set_result(done)
            return done
        start = clock()
        try:
            return future.result()
        finally:
            if foreground:
                FOREGROUND_WAITS[self.name] = FOREGROUND_WAITS.get(self.name, 0) + clock() - start


_INSIDE = threading.local()  # .seconds: what the jobs run inside the thread's current job took
clock = time.monotonic  # test_lane.py's own clock in its place


def _timed(seconds, name, *args):
    """LANE_JOBS[name](*args); its own seconds, less those of the jobs it ran inside it, into `seconds`."""
    outer = getattr(_INSIDE, "seconds", None)
    _INSIDE.seconds = 0.0
    start = clock()
    try:
        return LANE_JOBS[name](*args)
    finally:
        took = clock() - start
        seconds[name] = took - _INSIDE.seconds
        _INSIDE.seconds = None if outer is None else outer + took


def pytest_terminal_summary(terminalreporter):
    """How long each job of the second lane took, where it ran, and how long the foreground waited for the lane."""
    for where, seconds in (("second lane", LANE_SECONDS), ("the foreground ran", FOREGROUND_SECONDS)):
        if seconds:
            jobs = ", ".join(f"{name} {took:.0f} s" for name, took in seconds.items())
            terminalreporter.write_line(f"{where}: {sum(seconds.values()):.0f} s: {jobs}")
    if LANE_SECONDS or FOREGROUND_SECONDS:
        waits = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in FOREGROUND_WAITS.items() if seconds >= 1)
        terminalreporter.write_line(f"the foreground waited {sum(FOREGROUND_WAITS.values()):.0f} s for it: {waits}")
