// A kafkajs transactional producer, as its documentation shows one: four transactions over
// three partitions, committed and aborted in turn, then one that also commits a consumer
// group's offset (sendOffsets). Usage: node transactions.js BOOTSTRAP[,...] TOPIC TRANSACTIONAL_ID GROUP
const { Kafka, logLevel } = require('kafkajs');

const [bootstrap, topic, transactionalId, group] = process.argv.slice(2);
const kafka = new Kafka({ clientId: 'kbroker-test', brokers: bootstrap.split(','), logLevel: logLevel.ERROR });

async function main() {
  const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  for (let t = 0; t < 4; t++) {
    const commit = t % 2 === 0;
    const txn = await producer.transaction();
    const messages = [];
    for (let i = 0; i < 6; i++) {
      messages.push({ key: `k${i}`, value: `${commit ? 'committed' : 'aborted'}-${t}-${i}`, partition: i % 3 });
    }
    await txn.send({ topic, messages });
    if (commit) await txn.commit(); else await txn.abort();
  }
  const txn = await producer.transaction();
  await txn.send({ topic, messages: [{ value: 'with-offsets', partition: 0 }] });
  await txn.sendOffsets({ consumerGroupId: group, topics: [{ topic, partitions: [{ partition: 0, offset: '5' }] }] });
  await txn.commit();
  await producer.disconnect();
}

main().then(() => console.log('done'), (error) => { console.error(error); process.exit(1); });
