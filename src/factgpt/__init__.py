"""
The project's code behind the course's modules: a folder per concern, each importing only the ones
below it (the import contract in .importlinter, checked by lint-imports):
common < the course's model modules < corpus < settings < training, readout < the course's trainer
< pipeline < table < run.py.
"""
