from .lenet import *
