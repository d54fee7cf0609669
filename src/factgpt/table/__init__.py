"""
The assignment as one table (./run.sh): its rows and their tasks, the tasks' records, results.md
and results.json, the rows' processes, and the demo with its generated world. Only run.sh, the
notebook and the research scripts import it.
"""
