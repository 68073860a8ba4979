/* Unit tests for fxb_idtable: insert, find and remove by id checked against
 * a plain array, entries found after others around them were removed
 * (backward shift, no tombstones), iteration visiting each entry once, and
 * the size rules: doubled before passing half full, halved under an eighth
 * full, never below the minimum, so churn over ever-growing ids keeps it
 * small. */
/* fx-test-libs: fx_broker fx_wire fx_base */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "broker/idtable.h"
#include "fx_test.h"

/* A distinct pointer per id (never dereferenced). */
static void *ptr_of(uint64_t id)
{
    return (void *)(uintptr_t)(id * 8 + 8);
}

static void test_empty_table_finds_nothing_and_allocates_nothing(void **state)
{
    (void)state;
    fxb_idtable t = {0};
    assert_null(fxb_idtable_find(&t, 1));
    size_t pos = 0;
    assert_null(fxb_idtable_next(&t, &pos));
    assert_int_equal(fxb_idtable_capacity(&t), 0);
    assert_int_equal(fxb_idtable_count(&t), 0);
    fxb_idtable_deinit(&t);
}

static void test_inserted_entries_are_found_and_removed_ones_are_not(void **state)
{
    (void)state;
    fxb_idtable t = {0};
    for (uint64_t id = 1; id <= 5; id++)
        assert_int_equal(fxb_idtable_insert(&t, id * 3, ptr_of(id)), 0);
    assert_int_equal(fxb_idtable_count(&t), 5);
    assert_int_equal(fxb_idtable_capacity(&t), FXB_IDTABLE_MIN);
    for (uint64_t id = 1; id <= 5; id++) {
        fxb_idslot *e = fxb_idtable_find(&t, id * 3);
        assert_non_null(e);
        assert_int_equal(e->id, id * 3);
        assert_ptr_equal(e->p, ptr_of(id));
    }
    assert_null(fxb_idtable_find(&t, 4));
    assert_null(fxb_idtable_find(&t, 0));
    fxb_idtable_remove(&t, fxb_idtable_find(&t, 9));
    assert_null(fxb_idtable_find(&t, 9));
    assert_int_equal(fxb_idtable_count(&t), 4);
    assert_ptr_equal(fxb_idtable_find(&t, 12)->p, ptr_of(4));
    fxb_idtable_deinit(&t);
    assert_int_equal(fxb_idtable_capacity(&t), 0);
}

/* The table doubles before it would pass half full and halves once under
 * an eighth full, down to FXB_IDTABLE_MIN and no further. */
static void test_grows_at_half_full_and_shrinks_under_an_eighth(void **state)
{
    (void)state;
    fxb_idtable t = {0};
    for (uint64_t id = 1; id <= 8; id++)
        assert_int_equal(fxb_idtable_insert(&t, id, ptr_of(id)), 0);
    assert_int_equal(fxb_idtable_capacity(&t), 16); /* 8 of 16: half full */
    assert_int_equal(fxb_idtable_insert(&t, 9, ptr_of(9)), 0);
    assert_int_equal(fxb_idtable_capacity(&t), 32);
    for (uint64_t id = 10; id <= 64; id++)
        assert_int_equal(fxb_idtable_insert(&t, id, ptr_of(id)), 0);
    assert_int_equal(fxb_idtable_capacity(&t), 128);
    /* 128 slots: halved when fewer than 16 entries are left. */
    for (uint64_t id = 64; id > 16; id--)
        fxb_idtable_remove(&t, fxb_idtable_find(&t, id));
    assert_int_equal(fxb_idtable_count(&t), 16);
    assert_int_equal(fxb_idtable_capacity(&t), 128);
    fxb_idtable_remove(&t, fxb_idtable_find(&t, 16));
    assert_int_equal(fxb_idtable_capacity(&t), 64);
    for (uint64_t id = 15; id >= 1; id--)
        fxb_idtable_remove(&t, fxb_idtable_find(&t, id));
    assert_int_equal(fxb_idtable_count(&t), 0);
    assert_int_equal(fxb_idtable_capacity(&t), FXB_IDTABLE_MIN);
    fxb_idtable_deinit(&t);
}

/* Against a plain array of live ids: random inserts and removes over ids
 * that only grow (stride 3, as one worker of three sees them), with every
 * live id found and every removed one not, after every step; the size
 * stays bounded by the live count, not by the ids used. */
static void test_churn_over_growing_ids_matches_a_reference_and_stays_small(void **state)
{
    (void)state;
    enum { LIVE = 40, STEPS = 20000 };
    fxb_idtable t = {0};
    uint64_t live[LIVE] = {0}, next = 1;
    srand(12345);
    for (int step = 0; step < STEPS; step++) {
        size_t k = (size_t)rand() % LIVE;
        if (live[k] != 0) {
            fxb_idslot *e = fxb_idtable_find(&t, live[k]);
            assert_non_null(e);
            fxb_idtable_remove(&t, e);
            assert_null(fxb_idtable_find(&t, live[k]));
            live[k] = 0;
        } else {
            live[k] = next;
            next += 3;
            assert_int_equal(fxb_idtable_insert(&t, live[k], ptr_of(live[k])), 0);
        }
        size_t n = 0;
        for (size_t i = 0; i < LIVE; i++) {
            if (live[i] == 0)
                continue;
            n++;
            fxb_idslot *e = fxb_idtable_find(&t, live[i]);
            assert_non_null(e);
            assert_ptr_equal(e->p, ptr_of(live[i]));
        }
        assert_int_equal(fxb_idtable_count(&t), n);
        assert_true(fxb_idtable_capacity(&t) <= 4 * LIVE);
    }
    assert_true(next > 10000); /* the ids went far beyond the table's size */
    fxb_idtable_deinit(&t);
}

/* Iteration visits every entry exactly once and ends with NULL. */
static void test_iteration_visits_each_entry_once(void **state)
{
    (void)state;
    enum { N = 100 };
    fxb_idtable t = {0};
    for (uint64_t id = 1; id <= N; id++)
        assert_int_equal(fxb_idtable_insert(&t, id * 7, ptr_of(id)), 0);
    int seen[N + 1] = {0};
    size_t pos = 0, n = 0;
    for (fxb_idslot *e; (e = fxb_idtable_next(&t, &pos)) != NULL; n++) {
        assert_int_equal(e->id % 7, 0);
        uint64_t id = e->id / 7;
        assert_true(id >= 1 && id <= N);
        assert_ptr_equal(e->p, ptr_of(id));
        seen[id]++;
    }
    assert_int_equal(n, N);
    for (int i = 1; i <= N; i++)
        assert_int_equal(seen[i], 1);
    assert_null(fxb_idtable_next(&t, &pos));
    fxb_idtable_deinit(&t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_empty_table_finds_nothing_and_allocates_nothing),
    cmocka_unit_test(test_inserted_entries_are_found_and_removed_ones_are_not),
    cmocka_unit_test(test_grows_at_half_full_and_shrinks_under_an_eighth),
    cmocka_unit_test(test_churn_over_growing_ids_matches_a_reference_and_stays_small),
    cmocka_unit_test(test_iteration_visits_each_entry_once),
};
FX_TEST_MAIN(tests)
