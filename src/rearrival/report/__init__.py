"""Tables, figures, analysis and the HTML report (SPEC 13)."""
