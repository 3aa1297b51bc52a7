"""``python -m elastic_chaos.storagefs``: the storage daemon (see its module)."""
from __future__ import annotations

import sys

from elastic_chaos.storagefs.daemon import main

if __name__ == "__main__":
    sys.exit(main())
