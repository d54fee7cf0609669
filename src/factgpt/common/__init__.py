"""
The floor every other part stands on: the one error type, atomic files and locks, devices and
torchrun, stop signals, the question files (which the course's dataset and utils read), and how a
command ends. It imports nothing of the project.
"""
