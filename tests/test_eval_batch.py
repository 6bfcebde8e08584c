"""benchmarks/eval_batch.py: its table and JSON, and the property it rests on: context_nll's losses do not
depend on how many windows share a forward pass (the time, which it measures, is not tested)."""
from __future__ import annotations

import importlib.util
import json

from tiny import ROOT

spec = importlib.util.spec_from_file_location("eval_batch", ROOT / "benchmarks" / "eval_batch.py")
eval_batch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(eval_batch)


def test_every_batch_size_gives_the_same_losses_and_a_row_in_the_table_and_the_json(tmp_path, capsys):
    out = tmp_path / "batch.json"
    res = eval_batch.main(["--model", "txl-tiny", "--contexts", "8,40", "--batches", "1,3,32", "--targets", "7",
                           "--repeats", "1", "--json", str(out)])
    assert json.loads(out.read_text()) == res
    assert [(r["context"], r["batch_size"]) for r in res["rows"]] == [(c, b) for c in (8, 40) for b in (1, 3, 32)]
    assert all(r["max_difference"] < 1e-5 and r["seconds"] > 0 and r["page_faults"] >= 0 for r in res["rows"])
    assert [r["max_difference"] for r in res["rows"]][::3] == [0.0, 0.0]  # the first batch size against itself
    shown = capsys.readouterr().out
    assert "max |diff| (nats)" in shown and len(shown.splitlines()) == 2 + 6
