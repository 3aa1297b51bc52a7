"""``python3 -m elastic_chaos.localcluster COMMAND``: see :mod:`.cli`."""
from __future__ import annotations

import sys

from elastic_chaos.localcluster.cli import main

sys.exit(main())
