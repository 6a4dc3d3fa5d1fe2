"""Tables, figures, analysis and the HTML report (docs/DESIGN.md §13)."""
