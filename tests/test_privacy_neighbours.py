"""The neighbour relation of each mode lives in one table (``protocol.accounting``); the docs quote it.

The exact-loss tests of tests/test_privacy_history.py and tests/test_audit_device.py check the
relations' numbers; these check that every place that states a relation states the same one.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from aggregator.server.services.releases import person_neighbour
from protocol.accounting import (
    CENTRAL_NEIGHBOUR,
    HISTORY_NEIGHBOUR,
    NEIGHBOUR_RELATIONS,
    central_neighbour,
    neighbour_relation,
)
from protocol.encodings import BloomEncoding, DirectEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.releases import make_release

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_docs_privacy_quotes_every_relation_verbatim() -> None:
    page = _flat((DOCS / "privacy.md").read_text(encoding="utf-8"))
    for relation in NEIGHBOUR_RELATIONS:
        assert relation.sentence in page, relation
    assert CENTRAL_NEIGHBOUR in page and HISTORY_NEIGHBOUR in page


@pytest.mark.parametrize("relation", NEIGHBOUR_RELATIONS, ids=lambda r: f"{r.mode}-{r.value_kind}")
def test_the_guarantee_states_the_table_entry(relation: object) -> None:
    from protocol.accounting import NeighbourRelation

    assert isinstance(relation, NeighbourRelation)
    encoding = BloomEncoding(num_bits=32, num_hashes=3, num_cohorts=2)
    level = math.inf if relation.mode == "trusted" else 1.0
    none = "none" if relation.mode == "asymmetric" and relation.value_kind == "categorical" else None
    params = MetricParams(name="m", encoding=encoding, mode=relation.mode, level=level,
                          value_kind=relation.value_kind, none_value=none)
    guarantee = params.guarantee()
    assert guarantee.neighbour == relation.sentence
    assert guarantee.bits_changed == relation.hashes_changed * 3
    assert relation.one_way == (relation.mode == "asymmetric")


def test_every_mode_and_kind_has_exactly_one_relation() -> None:
    keys = [(r.mode, r.value_kind) for r in NEIGHBOUR_RELATIONS]
    assert len(keys) == len(set(keys)) == 6
    with pytest.raises(ParameterError) as info:
        neighbour_relation("symmetric", "multiset")  # type: ignore[arg-type]
    assert info.value.field == "mode"


def test_central_releases_state_the_central_relation() -> None:
    assert central_neighbour(1).endswith("at most 1 item") and central_neighbour(3).endswith("at most 3 items")
    release = make_release("ageo", [1, 2], 1.0, n_max=5, rng=1)
    assert person_neighbour(3, release).startswith(central_neighbour(3))
    visits = MetricParams(name="v", encoding=DirectEncoding(domain=("a", "b")), mode="trusted", level=math.inf)
    assert visits.guarantee().neighbour == neighbour_relation("trusted", "set").sentence
