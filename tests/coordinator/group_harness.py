"""A deterministic driver for the pure GroupManager: a fake clock, a timer table, an in-memory log.

No event loop: `call` runs one operation, applies its Result the way coordinator/runtime.py does
(timers, completions of parked requests, appends followed by `on_append`), and returns the token
whose answer appears in `responses` once it is known.
"""
import itertools

from coordinator.group.manager import GroupManager
from coordinator.results import GroupConfig, Result


class Harness:
    def __init__(self, now_ms: int = 1_000_000, **config):
        config.setdefault("initial_rebalance_delay_ms", 3000)
        self.now = now_ms
        counter = itertools.count(1)
        self.manager = GroupManager(GroupConfig(**config),
                                    member_id_factory=lambda prefix: f"{prefix}-{next(counter)}")
        self.timers: dict[tuple, int] = {}
        self.responses: dict[object, object] = {}
        self.log: list = []            # every record appended, in order
        self.append_error = 0          # the error the fake log answers with
        self.held: list = []           # appends not completed yet when hold_appends is True
        self.hold_appends = False
        self._tokens = itertools.count(1)

    # -- plumbing -----------------------------------------------------------------------------
    def apply(self, result: Result, token=None):
        for key, deadline in result.timers:
            old = self.timers.get(key)
            self.timers[key] = deadline if old is None else min(old, deadline)
        for parked, response in result.completions:
            assert parked not in self.responses, f"token {parked} answered twice"
            self.responses[parked] = response
        if result.response is not None and token is not None:
            self.responses[token] = result.response
        for append in result.appends:
            if self.hold_appends:
                self.held.append((append, token))
            else:
                self._finish_append(append, token, self.append_error)

    def _finish_append(self, append, token, error):
        if error == 0:
            self.log.extend(append.records)
        self.apply(append.on_append(error, self.now), token)

    def release(self, error: int = 0):
        held, self.held = self.held, []
        for append, token in held:
            self._finish_append(append, token, error)

    def call(self, method: str, *args, **kwargs):
        token = ("req", next(self._tokens))
        op = getattr(self.manager, method)
        if method in ("join_group", "sync_group"):
            kwargs["token"] = token
        result = op(*args, now_ms=self.now, **kwargs)
        self.apply(result, token)
        return token

    def answer(self, token):
        return self.responses.get(token)

    def advance(self, ms: int) -> None:
        """Moves the clock, firing due timers in deadline order (bounded)."""
        target = self.now + ms
        for _ in range(10_000):
            due = [(d, k) for k, d in self.timers.items() if d <= target]
            if not due:
                break
            deadline, key = min(due, key=lambda item: item[0])
            del self.timers[key]
            self.now = max(self.now, deadline)
            self.apply(self.manager.on_timer(key, self.now))
        else:
            raise AssertionError("timer storm")
        self.now = target

    # -- request helpers ------------------------------------------------------------------------
    def join(self, group, member_id="", instance_id=None, client_id="client",
             session_timeout_ms=10_000, rebalance_timeout_ms=30_000, protocol_type="consumer",
             protocols=(("range", b"sub"),), require_known_member_id=True):
        return self.call("join_group", group, member_id, instance_id, client_id, "/127.0.0.1",
                         session_timeout_ms, rebalance_timeout_ms, protocol_type,
                         [tuple(p) for p in protocols], require_known_member_id)

    def join_new(self, group, **kwargs):
        """The KIP-394 round trip: returns (member_id, token of the parked second join)."""
        first = self.answer(self.join(group, **kwargs))
        if kwargs.get("instance_id") is not None or first.error != 79:
            raise AssertionError(f"expected MEMBER_ID_REQUIRED, got {first}")
        return first.member_id, self.join(group, member_id=first.member_id, **kwargs)

    def sync(self, group, generation, member_id, assignments=None, instance_id=None,
             protocol_type=None, protocol_name=None):
        return self.call("sync_group", group, generation, member_id, instance_id, protocol_type,
                         protocol_name, assignments or {})

    def heartbeat(self, group, member_id, generation, instance_id=None):
        return self.answer(self.call("heartbeat", group, member_id, instance_id, generation))

    def state(self, group):
        g = self.manager.group(group)
        return g.state.value if g else None
