"""The report: one HTML page per profile from the executed notebooks, our numbers beside the
published ones, and the colophon every notebook ends with.
"""
