"""``python -m chaos.platforms.storagefs``: the storage daemon (see its module)."""
from __future__ import annotations

import sys

from chaos.platforms.storagefs.daemon import main

if __name__ == "__main__":
    sys.exit(main())
