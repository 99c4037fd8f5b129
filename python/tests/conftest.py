import sys
from pathlib import Path

# The tests exercise this checkout's library, wherever the package is installed from.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
