"""Read an unmodified script's own log lines as progress, by the user's regexes.

A script that does not use ``elastic_chaos.trainer.progress`` still prints something each
step or epoch ("epoch 7 loss 0.31", "it=1200"). With ``--progress-regex`` every
match (named group ``step``) becomes a ``progress/step`` event, and with
``--resume-regex`` the line it prints when it restores becomes a
``checkpoint/loaded`` event: the same shapes ``elastic_chaos.trainer.progress`` produces, so
the analysis needs no special case. What such a line cannot say is filled in
from the agent's own log, and marked: ``world_size`` from the node's last
rendezvous result (nodes x nproc_per_node) unless the regex has a
``world_size`` group. Each event carries ``via: "regex"`` and the line. The
script stamps nothing, so the follower gives each line its own window
(elastic_chaos.watchers.line_times): the event's time is its upper bound, the first
sample of the log's size that held the line (about 10 ms after it was written,
whichever read gives it to us), and a step also carries ``written_after``, the
lower bound: the last sample that did not hold it yet, so a save seen on disk
can be put after or before it (elastic_chaos.watchers.checkpoints).
"""
from __future__ import annotations

from elastic_chaos.events import AgentEv, CheckpointEv, Event, ProgressEv
from elastic_chaos.events.checkpoint_events import Loaded
from elastic_chaos.events.progress_events import Step, Unparsed
from elastic_chaos.spec import Observation, step_regex
from elastic_chaos.watchers.sources import Worker

LINE_LIMIT = 200


class ScriptLines:
    """Per-job state: compiled patterns, each node's world size and last step."""

    def __init__(self, observe: Observation, nproc_per_node: int = 1) -> None:
        self.progress = step_regex(observe.progress_regex, "progress_regex") if observe.progress_regex else None
        self.resume = step_regex(observe.resume_regex, "resume_regex") if observe.resume_regex else None
        self.nproc_per_node = nproc_per_node
        self._world: dict[tuple[str, int | None], int] = {}
        """(node, restart count) -> the world size of that round; (node, None): of the node's last round."""
        self._restart: dict[str, int] = {}
        self._last_step: dict[tuple[str, int | None], int] = {}
        """(node, worker group: elastic_chaos.watchers.sources.Worker.group; None where unknown) -> its last step."""
        self._leader: dict[tuple[str, int | None], int] = {}
        """(node, worker group) -> the local rank whose steps stand for the node's (the first to print one)."""
        self._warned: set[str] = set()
        self.lines_seen = 0
        """Lines of the script's own output fed so far (torchrun's banner aside): 0 after a run that
        timed out means the script printed nothing at all, not that the regex matched nothing."""

    @property
    def active(self) -> bool:
        return self.progress is not None or self.resume is not None

    def agent_event(self, event: Event) -> None:
        """Learn from the node's agent: its rendezvous result, its (re)started workers."""
        node = event.node or ""
        if event.type == AgentEv.RENDEZVOUS_COMPLETE and event.data.group_world_size is not None:
            world = event.data.group_world_size * self.nproc_per_node
            self._world[(node, None)] = self._world[(node, event.data.restart_count)] = world
            if event.data.restart_count is not None:
                self._restart[node] = event.data.restart_count
        elif event.type == AgentEv.WORKERS_STARTING:  # a new worker generation may repeat a step
            for key in [key for key in self._last_step if key[0] == node]:
                del self._last_step[key]
            self._leader = {key: rank for key, rank in self._leader.items() if key[0] != node}

    def feed(self, node: str, line: str, t: float, written_after: float | None = None,
             worker: Worker | None = None) -> Event | None:
        """The event a script line stands for, or None. ``t``: the latest the line can have been
        written; ``written_after``: a time it was not written yet (None: unknown). Its own line's
        window, not its read's: the lines of one read get ordered windows. ``worker``: who printed
        it, when known (elastic_chaos.watchers.sources): the node's steps are those of the first worker of
        its group to print one (each worker's file is read apart, not interleaved with the others'),
        and a worker's attempt names the round it trained in (its world size, its restart count)."""
        if line.strip() and not _torchrun_banner(line):
            self.lines_seen += 1
        if self.resume is not None:
            m = self.resume.search(line)
            if m is not None:
                step = _int(m["step"])
                if step is None:
                    return self._unparsed(node, "resume_regex", m["step"], line, t)
                return Event.make(CheckpointEv.LOADED, t, node, Loaded(step=step, via="regex", line=line[:LINE_LIMIT]))
        if self.progress is None:
            return None
        m = self.progress.search(line)
        if m is None:
            return None
        step = _int(m["step"])
        if step is None:
            return self._unparsed(node, "progress_regex", m["step"], line, t)
        attempt = worker.attempt if worker is not None else None
        key = (node, worker.group if worker is not None else None)
        if worker is not None and self._leader.setdefault(key, worker.local_rank) != worker.local_rank:
            return None  # several local ranks printing the same steps: one event each
        if self._last_step.get(key) == step:
            return None  # several local ranks interleaved in one log printing the same step: one event
        self._last_step[key] = step
        world = _int(m.groupdict().get("world_size"))
        agents = self._world.get((node, attempt), self._world.get((node, None)))
        from_agent = world is None and agents is not None
        return Event.make(ProgressEv.STEP, t, node, Step(
            step=step, via="regex", line=line[:LINE_LIMIT], world_size=agents if from_agent else world,
            world_size_from="agent" if from_agent else None,
            restart_count=attempt if attempt is not None else self._restart.get(node), written_after=written_after))

    def _unparsed(self, node: str, option: str, text: str | None, line: str, t: float) -> Event | None:
        """Once per option: a match whose ``step`` is not an integer (such lines are ignored)."""
        if option in self._warned:
            return None
        self._warned.add(option)
        return Event.make(ProgressEv.UNPARSED, t, node, Unparsed(
            option=option, step_text=text, line=line[:LINE_LIMIT],
            why=f"{option} matched but its step group {text!r} is not an integer; such lines are ignored"))


def _torchrun_banner(line: str) -> bool:
    """The lines torchrun prints around its OMP_NUM_THREADS warning (not the script's)."""
    text = line.strip()
    return set(text) == {"*"} or text.startswith("Setting OMP_NUM_THREADS")


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None
