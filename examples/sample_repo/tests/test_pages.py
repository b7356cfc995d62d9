from shelf.pages import page_count, paginate


def test_a_full_page_has_size_items():
    assert paginate(list(range(25)), 1) == list(range(10))
    assert paginate(list(range(25)), 3) == [20, 21, 22, 23, 24]


def test_page_count_rounds_up():
    assert page_count(25) == 3 and page_count(20) == 2
