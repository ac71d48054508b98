"""Importers that turn what centers publish into the catalog, and exporters back.

Every importer parses and validates a whole input before anything is stored: a bad
file is an ``InvalidInputError`` naming the file, the field and the value, and the
knowledge base is left as it was.
"""
