"""Never finishes in time: for --timeout."""

import time

time.sleep(60)
