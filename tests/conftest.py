import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# auto's tuning cache (SCALECOMM_TUNING_FILE) would carry one test's
# measurements into the next; tests that exercise it set their own file.
os.environ.setdefault("SCALECOMM_TUNING_FILE", "none")
