"""How many bytes of one gather's replies, or of one destination's messages, a bridge
signals inline before it holds the rest on the hold queue: a flood for one workflow then
adds only references to its history. Temporal fails a workflow task while more than
2 MB of signals wait for it, and ends a workflow past 50 MB of history; a flood of
inline messages did both, and its workflow was ended with its messages taken."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

from bridge.mq import hold
from bridge.mq.models import MQMessage
from mqgather.constants import INLINE_TRACKED


class InlineBytes:
    """The bytes one bridge signalled inline to each workflow (the most recent
    ``tracked``), less what ``per_second`` lets go of since."""

    def __init__(
        self, tracked: int = INLINE_TRACKED, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.tracked = tracked
        self.clock = clock
        self._sent: OrderedDict[Hashable, tuple[float, float]] = OrderedDict()  # bytes, when

    def held(
        self,
        key: Hashable,
        message: MQMessage,
        inline: int,
        budget: int,
        per_second: float = 0.0,
    ) -> bool:
        """Whether ``message`` for the workflow ``key`` waits on the hold queue rather
        than travel inline (counted as sent when it travels): when it weighs more than
        ``inline``, or once ``key`` was signalled ``budget`` bytes (of which
        ``per_second`` are let go of each second: a gather's lifetime counts whole, a
        collector's destination, which continues as new, by its rate).

        A message got before (BackoutCount above 0) is judged by its size alone, as at
        every earlier get: a redelivery of one held for its size is held again, and one
        held for its workflow's bytes comes inline (its workflow keeps the body, since
        the held copy's put backed out with the get).
        """
        size = hold.wire_size(message)
        if message.backout_count or size > inline:
            return size > inline
        now = self.clock()
        sent, since = self._sent.pop(key, (0.0, now))
        sent = max(sent - per_second * (now - since), 0.0)
        if sent + size > budget:
            self._sent[key] = (sent, now)
            return True
        self._sent[key] = (sent + size, now)
        if len(self._sent) > self.tracked:
            self._sent.popitem(last=False)
        return False
