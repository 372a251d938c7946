"""`evalpipe view`: a local web app over the runs of an outputs folder.

runs.py reads run directories in place (an index per run, refreshed as files
grow), through shapes.py, which checks each file has the shape the pages read (a
run that has not is listed apart with the reason); server.py serves the JSON API
and the page (static/, plus the report's shared transcript renderer and CSS from
evalpipe/_report/assets).
"""

from evalpipe.view.runs import Outputs, RunIndex
from evalpipe.view.server import ViewServer

__all__ = ["Outputs", "RunIndex", "ViewServer"]
