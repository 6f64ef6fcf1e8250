"""The repository's utils.py pattern: a progress bar drawn with sys.stdout.write (no terminal-size query here)."""
import sys
import time

TOTAL_BAR_LENGTH = 30.
begin_time = time.time()


def progress_bar(current, total, msg=None):
    cur_len = int(TOTAL_BAR_LENGTH*current/total)
    rest_len = int(TOTAL_BAR_LENGTH - cur_len) - 1
    sys.stdout.write(' [')
    sys.stdout.write('=' * cur_len)
    sys.stdout.write('>')
    sys.stdout.write('.' * rest_len)
    sys.stdout.write(']')
    if msg:
        sys.stdout.write(' | ' + msg)
    if current < total-1:
        sys.stdout.write('\r')
    else:
        sys.stdout.write('\n')
    sys.stdout.flush()
