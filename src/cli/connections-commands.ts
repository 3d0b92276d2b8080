import type { Argv } from 'yargs';
import { CONNECTION_ENV_PREFIX, listConnections, maskConnectionUrl } from '../authoring/connections/connections.ts';
import { printListing } from './table.ts';

/** `deferflow connections list`: the named connections this environment defines, passwords masked. */
export function registerConnectionsCommands(cli: Argv): void {
  cli.command('connections', 'Named connections (DEFERFLOW_CONN_<NAME>): list', (connections) =>
    connections
      .command(
        'list',
        `List the connections the environment defines (${CONNECTION_ENV_PREFIX}<NAME>=URL), passwords masked`,
        (command) => command.option('json', { type: 'boolean', describe: 'A JSON array instead of a table' }),
        (args) => {
          const rows = listConnections().map((connection) => ({ name: connection.name, url: maskConnectionUrl(connection.url) }));
          printListing(rows, {
            json: args.json,
            empty: `no connections: set ${CONNECTION_ENV_PREFIX}<NAME>=URL (e.g. ${CONNECTION_ENV_PREFIX}WAREHOUSE=postgres://user:pass@host/db)`,
            headers: ['NAME', 'URL'],
            cells: (row) => [row.name, row.url],
          });
        },
      )
      .demandCommand(1, 'name a connections command'),
  );
}
