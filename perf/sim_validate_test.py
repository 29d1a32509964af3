#!/usr/bin/env python3
"""Tests of sim_validate's placement logic: when a run waits, counts, is repeated, or retunes.

The probe, the measurement, the clock and sleep are fakes: a probe returns the next value
of a script (the placement seen at each probe), the clock advances only in sleep and in
each measurement, so the tests run in no time and see exactly the calls made.
"""
import importlib.machinery
import importlib.util
import os
import unittest

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sim_validate")
_LOADER = importlib.machinery.SourceFileLoader("sim_validate", _PATH)
_SPEC = importlib.util.spec_from_loader("sim_validate", _LOADER)
sv = importlib.util.module_from_spec(_SPEC)
_LOADER.exec_module(sv)

NEAR, FAR = 90.0, 400.0


class Machine:
    """A scripted placement and a clock: probes pop the script (its last value stays)."""

    def __init__(self, script, run_s=1.0):
        self.script = list(script)
        self.now = 0.0
        self.run_s = run_s
        self.probes = 0
        self.runs = 0

    def probe(self):
        self.probes += 1
        return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    def measure(self):
        self.runs += 1
        self.now += self.run_s
        return {65536: (5.0 * self.runs, 0)}

    def clock(self):
        return self.now

    def sleep(self, s):
        self.now += s

    def run(self, rtt, mode="match", wait_s=20, have_probe=True, given=False, wait=True):
        return sv.measure_in_placement(self.probe, self.measure, rtt, mode, wait_s, have_probe, given, wait,
                                       clock=self.clock, sleep=self.sleep)


class MeasureInPlacementTest(unittest.TestCase):
    def test_in_its_placement_a_run_counts_at_once(self):
        m = Machine([NEAR])
        times, counts, before, after = m.run(NEAR)
        self.assertEqual((m.runs, counts, before, after), (1, True, NEAR, NEAR))
        self.assertEqual(times, {65536: (5.0, 0)})

    def test_a_run_waits_for_its_placement_to_return(self):
        # Far for 8 probes (2 s of polling), then near: one run, after the wait.
        m = Machine([FAR] * 8 + [NEAR])
        times, counts, before, _ = m.run(NEAR)
        self.assertEqual((m.runs, counts, before), (1, True, NEAR))
        self.assertAlmostEqual(m.now, 8 * 0.25 + 1.0)

    def test_a_placement_away_for_the_whole_wait_measures_nothing(self):
        m = Machine([FAR])
        times, counts, before, after = m.run(NEAR, wait_s=5)
        self.assertEqual((times, counts, before, after, m.runs), (None, False, FAR, None, 0))
        self.assertGreaterEqual(m.now, 5)

    def test_a_flip_during_the_run_repeats_it_until_the_deadline(self):
        # Each run's probe after it sees far: not counted, repeated while the
        # wait lasts (3 s, runs of 1 s), then the last run is returned uncounted.
        m = Machine([NEAR, FAR] * 10)
        times, counts, before, after = m.run(NEAR, wait_s=3)
        self.assertEqual((counts, before, after), (False, NEAR, FAR))
        self.assertEqual(m.runs, 3)
        self.assertEqual(times, {65536: (15.0, 0)})

    def test_a_flip_then_away_until_the_deadline_drops_the_run(self):
        # Measured once (the probe after it far), then far for the rest of
        # the wait: nothing is kept, for the caller to retune.
        m = Machine([NEAR, FAR, FAR])
        times, counts, before, after = m.run(NEAR, wait_s=3)
        self.assertEqual((times, counts, before, after, m.runs), (None, False, FAR, None, 1))

    def test_a_flip_that_settles_counts_the_repeat(self):
        m = Machine([NEAR, FAR, NEAR, NEAR])
        _, counts, _, _ = m.run(NEAR)
        self.assertEqual((counts, m.runs), (True, 2))

    def test_a_given_tuning_counts_every_run_without_waiting(self):
        m = Machine([FAR])
        times, counts, _, _ = m.run(None, given=True)
        self.assertEqual((counts, m.runs), (True, 1))
        self.assertEqual(m.now, 1.0)

    def test_an_unstable_tuning_of_ours_runs_once_and_does_not_count(self):
        m = Machine([FAR, NEAR])
        _, counts, _, _ = m.run(None)
        self.assertEqual((counts, m.runs), (False, 1))

    def test_without_a_probe_every_run_counts(self):
        m = Machine([None])
        _, counts, _, _ = m.run(None, have_probe=False)
        self.assertEqual((counts, m.runs), (True, 1))

    def test_placement_any_measures_once_and_records_the_probes(self):
        m = Machine([FAR, FAR])
        times, counts, before, after = m.run(NEAR, mode="any")
        self.assertEqual((counts, before, after, m.runs), (False, FAR, FAR, 1))
        self.assertIsNotNone(times)

    def test_no_wait_runs_once_in_any_placement(self):
        m = Machine([FAR])
        _, counts, _, _ = m.run(NEAR, wait=False)
        self.assertEqual((counts, m.runs), (False, 1))


class MeasureRowTest(unittest.TestCase):
    def test_a_row_in_its_placement_uses_the_latest_tuning(self):
        calls = []

        def measure_in(rtt, wait=True):
            calls.append((rtt, wait))
            return {1: (1.0, 0)}, True, rtt, rtt

        m, k, counts, _, _ = sv.measure_row(measure_in, [FAR, NEAR], lambda: self.fail("retuned"))
        self.assertEqual((k, counts, calls), (1, True, [(NEAR, True)]))

    def test_a_placement_that_stayed_away_retunes_and_measures_against_the_new_tuning(self):
        rtts = [NEAR]
        calls = []

        def measure_in(rtt, wait=True):
            calls.append((rtt, wait))
            if rtt == NEAR:
                return None, False, FAR, None
            return {1: (2.0, 0)}, True, rtt, rtt

        m, k, counts, _, _ = sv.measure_row(measure_in, rtts, lambda: rtts.append(FAR))
        self.assertEqual((k, counts, rtts), (1, True, [NEAR, FAR]))
        self.assertEqual(calls, [(NEAR, True), (FAR, True)])
        self.assertEqual(m, {1: (2.0, 0)})

    def test_when_even_the_new_placement_stays_away_the_row_is_measured_without_waiting(self):
        rtts = [NEAR]
        calls = []

        def measure_in(rtt, wait=True):
            calls.append((rtt, wait))
            if wait:
                return None, False, 200.0, None
            return {1: (3.0, 0)}, False, 200.0, 200.0

        m, k, counts, _, _ = sv.measure_row(measure_in, rtts, lambda: rtts.append(FAR))
        self.assertEqual((k, counts), (1, False))
        self.assertEqual(calls, [(NEAR, True), (FAR, True), (FAR, False)])
        self.assertEqual(m, {1: (3.0, 0)})

    def test_a_given_tuning_is_never_retuned(self):
        calls = []

        def measure_in(rtt, wait=True):
            calls.append(wait)
            return (None, False, FAR, None) if wait else ({1: (4.0, 0)}, True, FAR, FAR)

        m, k, counts, _, _ = sv.measure_row(measure_in, [None], None)
        self.assertEqual((k, calls), (0, [True, False]))


if __name__ == "__main__":
    unittest.main()
