"""How a run is reported: the report's rows read from run directories (report.py, rows.py), its
plots and page (report_plots.py, report_html.py), `accelopt show` and `runs` (runs.py), and
`accelopt check` over a folder of solutions (check_suite.py)."""
