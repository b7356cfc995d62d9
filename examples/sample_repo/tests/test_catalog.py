from shelf.catalog import Book, Catalog


def test_add_merges_copies_of_the_same_isbn():
    catalog = Catalog()
    catalog.add(Book("1", "Dune"))
    catalog.add(Book("1", "Dune", copies=2))
    assert catalog.books["1"].copies == 3


def test_search_ignores_case():
    catalog = Catalog()
    catalog.add(Book("1", "Dune"))
    assert [b.isbn for b in catalog.search("dune")] == ["1"]
