"""Stand-in (ours) for a published pattern (issue 48, class 3, found by the corpus): the script builds the project's
class and calls its train(); the DataLoader comes from data.py's function, through the class's attribute, so no
file both builds the loader and iterates it."""

import torch
from model import Regression


def main() -> None:
    torch.manual_seed(0)
    regression = Regression(batch_size=4)
    print("samples", regression.train(epochs=2))
    torch.save(regression.net.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
