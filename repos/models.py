"""Database models: everything that is not git content (see DESIGN.md, "Model").

None yet; repositories, streams, changesets, proposals, operations, events and
credentials arrive with the services that use them.
"""
