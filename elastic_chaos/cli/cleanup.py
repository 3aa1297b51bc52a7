"""``elastic-chaos cleanup``: finish the rollbacks a crashed game day left open.

Reads the cleanup journal in ``--state-dir`` (``cleanup-journal.jsonl``) and,
newest first, stops FIS experiments, deletes FIS templates and uncordons
nodes that a game day journalled and never closed. Each undo is audited like
any game-day call; a target already gone counts as done. ``--dry-run`` lists
what it would undo and changes nothing.

Exit 0 when nothing is left open, 1 when an undo failed (the entry stays open
for the next try), 2 on a usage or setup error.

Processes a killed *local* run left on this machine (etcd, nodes, cgroups) are
``elastic-chaos reap``'s business, not this command's.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

EXAMPLES = """
examples:
  elastic-chaos cleanup --dry-run                    # what a crashed game day left open
  elastic-chaos cleanup --region us-west-2           # finish it (FIS templates, experiments)
  elastic-chaos cleanup --region us-west-2 --kubeconfig ~/.kube/eks   # uncordons need Kubernetes
"""


def register(sub: Any) -> None:
    from elastic_chaos.cli.gameday import default_state_dir
    p = sub.add_parser("cleanup", help="finish rollbacks a crashed game day left open (journal replay)",
                       description=__doc__ + EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--state-dir", type=Path, default=default_state_dir(),
                   help="where the game days keep audit.jsonl and cleanup-journal.jsonl")
    p.add_argument("--dry-run", action="store_true", help="list what is open; undo nothing")
    p.add_argument("--region", help="AWS region (FIS rollbacks)")
    p.add_argument("--profile", help="AWS profile")
    p.add_argument("--endpoint-url", help="send AWS calls here (a test server); default AWS")
    p.add_argument("--kubeconfig", help="kubeconfig for uncordons")
    p.add_argument("--kube-context", help="kubeconfig context")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from elastic_chaos.cli.gameday_setup import AUDIT_FILE, JOURNAL_FILE
    from elastic_chaos.gameday.cleanup import describe, replay
    from elastic_chaos.platforms.aws.guard import AuditLog, CleanupJournal, Guard
    run_id = f"cleanup-{time.strftime('%Y%m%d-%H%M%S')}"
    journal = CleanupJournal(args.state_dir / JOURNAL_FILE, run_id)
    pending = journal.pending()
    if not pending:
        print(f"nothing to clean up ({journal.path}); what a killed local run left running: `elastic-chaos reap`")
        return 0
    kinds = {u.kind for u in pending}
    aws = _aws(args) if kinds & {"delete-fis-template", "stop-fis-experiment"} else None
    core = _core(args) if "uncordon" in kinds and not args.dry_run else None
    guard = Guard(dry_run=args.dry_run, armed=True, audit=AuditLog(args.state_dir / AUDIT_FILE, run_id),
                  journal=journal)
    done = replay(guard, aws=aws, core_v1=core)
    for r in done:
        print(f"{'would undo' if args.dry_run else 'undo'} {describe(r.undo)}: {r.result}")
    return 1 if any(not r.closed for r in done) and not args.dry_run else 0


def _aws(args: argparse.Namespace) -> Any:
    from elastic_chaos.platforms.aws.clients import make_clients
    return make_clients(region=args.region, endpoint_url=args.endpoint_url, profile=args.profile)


def _core(args: argparse.Namespace) -> Any:
    from elastic_chaos.platforms.kubernetes.clients import core_v1_api  # the same credential rules as watch
    return core_v1_api(args.kubeconfig, args.kube_context)
