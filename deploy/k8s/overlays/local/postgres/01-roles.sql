-- One role and one database per service, each role owning its database and nobody else
-- allowed to connect to it: a service cannot read another's tables, so the only way
-- between them is an event. The passwords are docker-compose.yml's DATABASE_URLs.
--
-- Postgres runs this only when its volume is empty. The services do the same themselves
-- on every start (pgdb.Ensure, through DATABASE_ADMIN_URL), so a volume created before
-- this file existed, or a database dropped by hand, heals on the next start.

CREATE ROLE ordering LOGIN PASSWORD 'ordering-dev';
CREATE DATABASE ordering OWNER ordering;
REVOKE ALL ON DATABASE ordering FROM PUBLIC;

CREATE ROLE inventory LOGIN PASSWORD 'inventory-dev';
CREATE DATABASE inventory OWNER inventory;
REVOKE ALL ON DATABASE inventory FROM PUBLIC;

CREATE ROLE notification LOGIN PASSWORD 'notification-dev';
CREATE DATABASE notification OWNER notification;
REVOKE ALL ON DATABASE notification FROM PUBLIC;

CREATE ROLE emailprovider LOGIN PASSWORD 'emailprovider-dev';
CREATE DATABASE emailprovider OWNER emailprovider;
REVOKE ALL ON DATABASE emailprovider FROM PUBLIC;
