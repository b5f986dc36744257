"""The acceptance night: a matrix of recorded boots, its production guard, its ladders."""
