"""A model of a PTX mbarrier for the ring-protocol tests (the GEMM's cluster ring, its ping-pong
consumers, the attention backward's ring): shared by tests/test_hopper_cluster.py,
tests/test_hopper_pingpong.py and tests/test_hopper_bwd_protocol.py."""


class Mbarrier:
    """mbarrier rules (PTX): a phase completes when its pending arrivals and its tx-count are both
    zero (the tx-count may go below zero while a peer's bytes land before the local expect_tx);
    try_wait.parity(p) passes once the phase of parity p has completed, i.e. while the current
    phase's parity differs from p, so it cannot tell phase r from r - 2."""
    def __init__(self, count):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def _settle(self):
        if self.pending == 0 and self.tx == 0:
            self.phase, self.pending = self.phase + 1, self.count

    def arrive(self, expect_tx=0):
        self.tx += expect_tx
        self.pending -= 1
        assert self.pending >= 0, "more arrivals than the barrier's count in one phase"
        self._settle()

    def complete_tx(self, n):
        self.tx -= n
        self._settle()

    def passed(self, parity):
        return (self.phase & 1) != parity
