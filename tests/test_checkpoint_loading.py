"""Safe loading stays on: fairseq's checkpoint classes load with weights_only=True, nothing else does."""

import argparse
import collections
import fractions
import io

import numpy
import pytest
import torch

import vaswani_plugin

vaswani_plugin.register()  # installs the allow-list (conftest's call did already)


def round_trip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_fairseq_checkpoint_contents_load_safely():
    # The shapes of what fairseq stores: a legacy arch's args, --eval-bleu's numpy counts.
    state = {
        "cfg": {"model": argparse.Namespace(arch="transformer", encoder_embed_dim=512)},
        "model": collections.OrderedDict(weight=torch.ones(2)),
        "extra_state": {
            "metrics": {"valid": [(0, "_bleu_counts", "AverageMeter", {"val": numpy.array([3, 2, 1, 0])})]}
        },
    }
    loaded = round_trip(state)
    assert loaded["cfg"]["model"].encoder_embed_dim == 512
    assert loaded["extra_state"]["metrics"]["valid"][0][3]["val"].tolist() == [3, 2, 1, 0]


class NotAllowed:
    pass


def test_other_classes_are_still_refused():
    with pytest.raises(Exception, match="weights_only|Unsupported global"):
        round_trip({"payload": NotAllowed()})
    with pytest.raises(Exception, match="weights_only|Unsupported global"):
        round_trip({"payload": fractions.Fraction(1, 3)})
