-- name: ListBooks :many
-- One page of the catalogue in id order: the books after the cursor (all, without one),
-- at most max_rows of them. Keyset, not OFFSET: a deep page costs what the first does.
SELECT * FROM books
WHERE sqlc.narg(after)::uuid IS NULL OR id > sqlc.narg(after)::uuid
ORDER BY id
LIMIT sqlc.arg(max_rows);

-- name: LockCatalogue :exec
-- Taken by every PUT /books/{id} before it looks at the catalogue's size, and held to its
-- commit: PUTs take turns, so two of them cannot both see room for one more book.
-- Reservations do not take it; they never add a book. ("books" in ASCII.)
SELECT pg_advisory_xact_lock(x'626f6f6b73'::bigint);

-- name: BooksIfNew :one
-- The size of the catalogue if the book is new, 0 if it exists already (replacing a book
-- never grows the catalogue). Read after LockCatalogue, so it counts every committed PUT.
SELECT CASE WHEN EXISTS (SELECT 1 FROM books b WHERE b.id = sqlc.arg(id)::uuid) THEN 0
            ELSE (SELECT count(*) FROM books c) END::bigint AS books;

-- name: GetBook :one
SELECT * FROM books WHERE id = $1;

-- name: UpsertBook :one
-- PUT /books/{id}: absolute values, so applying it twice is applying it once. The WHERE
-- keeps a book that has more copies reserved than the new on_hand unchanged (no row comes
-- back) instead of breaking the promise made to those orders. created is true when the
-- row was inserted: only a new row has xmax 0.
INSERT INTO books (id, title, on_hand)
VALUES ($1, $2, $3)
ON CONFLICT (id) DO UPDATE
SET title = EXCLUDED.title, on_hand = EXCLUDED.on_hand, updated_at = now()
WHERE books.reserved <= EXCLUDED.on_hand
RETURNING id, title, on_hand, reserved, updated_at, (xmax = 0)::bool AS created;

-- name: LockBooks :many
-- The row locks of one order, taken in one fixed order (book id ascending). Two orders
-- that share books lock them in the same order, so one waits for the other instead of
-- each holding a book the other needs: no deadlock, whatever the order of their lines.
SELECT id, on_hand, reserved
FROM books
WHERE id = ANY(sqlc.arg(ids)::uuid[])
ORDER BY id
FOR UPDATE;

-- name: AddReserved :execrows
-- Called with the rows already locked by LockBooks and the lines checked against them.
UPDATE books
SET reserved = books.reserved + l.quantity, updated_at = now()
FROM (SELECT unnest(sqlc.arg(ids)::uuid[]) AS book_id, unnest(sqlc.arg(quantities)::int[]) AS quantity) AS l
WHERE books.id = l.book_id;

-- name: InsertReservations :execrows
-- All lines of an order or, when the order was reserved before, none: DO NOTHING turns a
-- second reservation of the same order into 0 rows for the caller to see.
INSERT INTO reservations (order_id, book_id, quantity)
SELECT sqlc.arg(order_id), unnest(sqlc.arg(ids)::uuid[]), unnest(sqlc.arg(quantities)::int[])
ON CONFLICT (order_id, book_id) DO NOTHING;

-- name: ListReservations :many
SELECT * FROM reservations WHERE order_id = $1 ORDER BY book_id;

-- name: RecordAnswer :execrows
-- 0 rows: this order was answered before, under another message id.
INSERT INTO order_answers (order_id, outcome)
VALUES ($1, $2)
ON CONFLICT (order_id) DO NOTHING;

-- name: RecordAnswers :execrows
-- RecordAnswer for the orders of a batch. Fewer rows than orders: one was answered before.
INSERT INTO order_answers (order_id, outcome)
SELECT unnest(sqlc.arg(order_ids)::uuid[]), unnest(sqlc.arg(outcomes)::text[])
ON CONFLICT (order_id) DO NOTHING;

-- name: InsertReservationsOfOrders :execrows
-- InsertReservations for the lines of several orders, one row per line.
INSERT INTO reservations (order_id, book_id, quantity)
SELECT unnest(sqlc.arg(order_ids)::uuid[]), unnest(sqlc.arg(book_ids)::uuid[]), unnest(sqlc.arg(quantities)::int[])
ON CONFLICT (order_id, book_id) DO NOTHING;
