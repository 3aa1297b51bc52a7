"""``python3 -m chaos.platforms.kubernetes.localcluster COMMAND``: see :mod:`.cli`."""
from __future__ import annotations

import sys

from chaos.platforms.kubernetes.localcluster.cli import main

sys.exit(main())
