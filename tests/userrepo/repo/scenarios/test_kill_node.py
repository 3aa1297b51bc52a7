"""Our training script survives losing one of its two nodes, and loses at most one checkpoint interval."""

EPOCH = r"epoch (?P<step>\d+)/"                              # train.py prints "epoch 7/1000 loss ..."
RESUMED = r"resumed from \S+ at epoch (?P<step>\d+)"         # ... and this when it restores
CHECKPOINT = "checkpoints/last.pt"                           # relative to the job's shared workdir


def test_losing_a_node_costs_at_most_one_checkpoint_interval(run_hypothesis):
    run = run_hypothesis(
        "kill-node",
        # from pytest's rootdir; 16384 samples make an epoch ~0.3 s here, so a save every 2 epochs holds still
        # for the file watcher's 0.2 s poll (at 4096, epochs of 0.09 s rewrote it faster than a save is confirmed)
        script=["train.py", "--save-every", "2", "--checkpoint", CHECKPOINT, "--samples", "16384"],
        progress_regex=EPOCH, resume_regex=RESUMED, checkpoint=CHECKPOINT, unit="epoch",
        steady_steps=4, checkpoint_every=2,          # fault after 4 epochs; lose at most 2
        replace_lost_nodes=False, last_call_timeout=3,
    )
    (fault,) = run.recoveries()
    assert fault.lost_steps is not None and fault.lost_steps <= 2
