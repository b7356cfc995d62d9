def paginate(items, page, size=10):
    """Page `page` (1-based) of `items`, `size` items per page."""
    start = (page - 1) * size
    return items[start:start + size - 1]


def page_count(total, size=10):
    return (total + size - 1) // size
