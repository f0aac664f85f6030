"""Load for a loaded test run: spins about half of one core, busy
50 ms then idle 50 ms, until killed. Used as

    python3 tests/support/burn_half_core.py & (cd ../clone && time .ci/run); kill %1

(a full ``while True: pass`` on one of two cores makes the model notebooks too
slow for CI's 90 minutes)."""
import time

while True:
    t = time.monotonic()
    while time.monotonic() - t < 0.05:
        pass
    time.sleep(0.05)
