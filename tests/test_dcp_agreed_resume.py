"""Every rank resumes from the save rank 0 names (elastic_chaos.trainer.dcp_checkpoint.agreed_candidates): on two
real gloo processes whose views of the checkpoint folder differ, as a shared volume's stale attribute cache can
make them (rank 1's ``latest`` one save behind). Each rank sees its own copy of the folder here."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from test_dcp_checkpoint import folder

from elastic_chaos.trainer.dcp_checkpoint import write_pointer

TWO_RANKS = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from elastic_chaos.trainer.dcp_checkpoint import agreed_candidates

    def rank(r, root):
        dist.init_process_group("gloo", init_method=f"file://{root}/store", rank=r, world_size=2)
        try:
            got = agreed_candidates(Path(root) / f"view-{r}", None)
            (Path(root) / f"rank-{r}.json").write_text(json.dumps([p.name for p in got]))
        finally:
            dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(rank, args=(sys.argv[1],), nprocs=2, join=True)
    """)


def test_a_rank_whose_pointer_is_one_save_behind_resumes_from_rank_0s_save_and_says_so(tmp_path: Path) -> None:
    for r, newest in ((0, 60), (1, 40)):
        view = tmp_path / f"view-{r}"
        for step in (40, 60):
            folder(view, step)
        write_pointer(view, view / f"step-{newest:08d}")
    script = tmp_path / "two_ranks.py"      # a file: spawn re-imports its main module
    script.write_text(TWO_RANKS)
    out = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parent.parent)
    assert out.returncode == 0, out.stderr
    orders = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert orders[0] == orders[1] == ["step-00000060", "step-00000040"]
    assert "['step-00000040'] first) than on rank 0 (['step-00000060'] first): resuming as rank 0 does" in out.stderr
    assert "rank 0: " not in out.stderr
