-- One role and one database per service, each role owning its database and nobody else
-- allowed to connect to it: a service cannot read another's tables, so the only way
-- between them is an event. The passwords are docker-compose.yml's DATABASE_URLs.
--
-- Postgres runs this only when its volume is empty. The services do the same themselves
-- on every start (pgdb.Ensure, through DATABASE_ADMIN_URL), so a volume created before
-- this file existed, or a database dropped by hand, heals on the next start.
--
-- Each role carries the server-side bounds of its sessions (pgdb.RoleSettings, which
-- pgdb.Ensure sets again on every start): a session of the role is bounded even when its
-- client sets nothing. No statement of a service's takes more than milliseconds, nor sits
-- idle inside a transaction; migrations run without the statement timeout.

CREATE ROLE ordering LOGIN PASSWORD 'ordering-dev';
CREATE DATABASE ordering OWNER ordering;
REVOKE ALL ON DATABASE ordering FROM PUBLIC;
ALTER ROLE ordering SET idle_in_transaction_session_timeout = '30s';
ALTER ROLE ordering SET statement_timeout = '5s';

CREATE ROLE inventory LOGIN PASSWORD 'inventory-dev';
CREATE DATABASE inventory OWNER inventory;
REVOKE ALL ON DATABASE inventory FROM PUBLIC;
ALTER ROLE inventory SET idle_in_transaction_session_timeout = '30s';
ALTER ROLE inventory SET statement_timeout = '5s';

CREATE ROLE notification LOGIN PASSWORD 'notification-dev';
CREATE DATABASE notification OWNER notification;
REVOKE ALL ON DATABASE notification FROM PUBLIC;
ALTER ROLE notification SET idle_in_transaction_session_timeout = '30s';
ALTER ROLE notification SET statement_timeout = '5s';

CREATE ROLE emailprovider LOGIN PASSWORD 'emailprovider-dev';
CREATE DATABASE emailprovider OWNER emailprovider;
REVOKE ALL ON DATABASE emailprovider FROM PUBLIC;
ALTER ROLE emailprovider SET idle_in_transaction_session_timeout = '30s';
ALTER ROLE emailprovider SET statement_timeout = '5s';
