"""Fails in the user's own code, two calls deep: its traceback must start here, as under plain `python`."""


def load_batch() -> None:
    raise ValueError("deliberate failure in the user's code")


def main() -> None:
    load_batch()


if __name__ == "__main__":
    main()
