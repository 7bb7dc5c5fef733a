"""Unit tests of the runner's signal handler (no VM)."""

import unittest

from labkit import boot


class StopTest(unittest.TestCase):
    def test_a_stopped_runner_kills_its_lab_hosts(self):
        p = __import__("subprocess").Popen(["sleep", "60"])
        boot.LIVE_HOSTS.add(p)
        try:
            with self.assertRaises(SystemExit) as e:
                boot.stop_lab_hosts(15, None)
            self.assertEqual(e.exception.code, 143)
            self.assertEqual(p.wait(timeout=10), -9)
        finally:
            boot.LIVE_HOSTS.discard(p)


if __name__ == "__main__":
    unittest.main()
