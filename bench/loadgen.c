/*
 * kbroker-loadgen: the broker benchmark's load generator, in C on librdkafka.
 *
 *   produce -b BOOTSTRAP -t TOPIC -s SIZE -c COUNT -f PAYLOAD_FILE [-X key=value]...
 *   consume -b BOOTSTRAP -t TOPIC -g GROUP -n SHARE [-T SECONDS] [-X key=value]...
 *
 * produce: COUNT values of SIZE bytes, taken in turn from PAYLOAD_FILE (variants of SIZE bytes
 * each, written by bench/broker_load.py: JSON-like events that compress the way application data
 * does). librdkafka references the values in place (no copy per message). Ends with a flush.
 *
 * consume: joins GROUP subscribed to TOPIC; partitions are paused on assignment until this
 * member holds SHARE of them (so a member that joins first does not read the others' share),
 * then read in batches until every assigned partition reports its end. The last-message time
 * is that of the last batch holding messages, not of the end-of-partition events.
 *
 * Both print one JSON line: counts, and the CLOCK_MONOTONIC times (seconds) of the first and
 * last message, so a caller can time several processes together; consume also prints the CPU
 * seconds it used between them ("cpu"). Bounded by COUNT and -T.
 */
#include <errno.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* CPU seconds of this process, all threads (librdkafka's included). */
static double cpu_now(void) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
               ru.ru_stime.tv_usec / 1e6;
}

static void die(const char *what, const char *detail) {
        fprintf(stderr, "kbroker-loadgen: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
        exit(2);
}

static long delivered, failed;
static double first_t, last_t, first_cpu, last_cpu;
static char last_error[256];

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
        (void)rk, (void)opaque;
        if (m->err) {
                failed++;
                snprintf(last_error, sizeof(last_error), "%s", rd_kafka_err2str(m->err));
        } else {
                delivered++;
        }
        last_t = now();
}

static void set(rd_kafka_conf_t *conf, const char *kv) {
        char errstr[512], key[256];
        const char *eq = strchr(kv, '=');
        if (!eq || (size_t)(eq - kv) >= sizeof(key))
                die("bad -X (want key=value)", kv);
        memcpy(key, kv, eq - kv);
        key[eq - kv] = '\0';
        if (rd_kafka_conf_set(conf, key, eq + 1, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
                die(errstr, NULL);
}

static char *read_file(const char *path, size_t *len) {
        FILE *f = fopen(path, "rb");
        if (!f)
                die("cannot open payload file", strerror(errno));
        fseek(f, 0, SEEK_END);
        *len = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *buf = malloc(*len ? *len : 1);
        if (!buf || fread(buf, 1, *len, f) != *len)
                die("cannot read payload file", path);
        fclose(f);
        return buf;
}

static int produce(rd_kafka_conf_t *conf, const char *topic, long size, long count,
                   const char *payload_path, double timeout_s) {
        char errstr[512];
        size_t len;
        char *payloads = read_file(payload_path, &len);
        long variants = size > 0 ? (long)(len / size) : 0;
        if (variants < 1)
                die("payload file holds no value of the given size", payload_path);
        rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
        rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
        if (!rk)
                die(errstr, NULL);
        double deadline = now() + timeout_s;
        first_t = now();
        long sent = 0;
        while (sent < count && now() < deadline) {
                char *value = payloads + (sent % variants) * size;
                rd_kafka_resp_err_t err = rd_kafka_producev(
                    rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_VALUE(value, (size_t)size),
                    RD_KAFKA_V_MSGFLAGS(0), RD_KAFKA_V_END);
                if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                        rd_kafka_poll(rk, 1);
                        continue;
                }
                if (err)
                        die("produce failed", rd_kafka_err2str(err));
                if (++sent % 1024 == 0)
                        rd_kafka_poll(rk, 0);
        }
        double left = deadline - now();
        rd_kafka_flush(rk, left > 1 ? (int)(left * 1000) : 1000);
        long queued = rd_kafka_outq_len(rk);
        printf("{\"messages\": %ld, \"delivered\": %ld, \"failed\": %ld, \"queued\": %ld, "
               "\"bytes\": %ld, \"t0\": %.6f, \"t1\": %.6f, \"error\": \"%s\"}\n",
               sent, delivered, failed, queued, delivered * size, first_t, last_t, last_error);
        rd_kafka_destroy(rk);
        free(payloads);
        return failed || queued || delivered < count;
}

static int share;

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque) {
        (void)opaque;
        if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
                rd_kafka_assign(rk, parts);
                rd_kafka_pause_partitions(rk, parts);
        } else {
                rd_kafka_assign(rk, NULL);
        }
}

static int assigned_count(rd_kafka_t *rk) {
        rd_kafka_topic_partition_list_t *parts = NULL;
        if (rd_kafka_assignment(rk, &parts) || !parts)
                return 0;
        int n = parts->cnt;
        rd_kafka_topic_partition_list_destroy(parts);
        return n;
}

static int consume(rd_kafka_conf_t *conf, const char *topic, double timeout_s) {
        char errstr[512];
        set(conf, "enable.partition.eof=true");
        rd_kafka_conf_set_rebalance_cb(conf, on_rebalance);
        rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
        if (!rk)
                die(errstr, NULL);
        rd_kafka_poll_set_consumer(rk);
        rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(sub, topic, RD_KAFKA_PARTITION_UA);
        if (rd_kafka_subscribe(rk, sub))
                die("subscribe failed", topic);
        rd_kafka_topic_partition_list_destroy(sub);
        double deadline = now() + timeout_s;
        /* Settle: paused until this member holds its share of the partitions. */
        while (now() < deadline && assigned_count(rk) != share) {
                rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 50);
                if (m)
                        rd_kafka_message_destroy(m);
        }
        rd_kafka_topic_partition_list_t *parts = NULL;
        rd_kafka_assignment(rk, &parts);
        rd_kafka_resume_partitions(rk, parts);
        int eofs = 0, total = parts ? parts->cnt : 0;
        int *at_eof = calloc(total > 0 ? total : 1, sizeof(int));
        rd_kafka_queue_t *queue = rd_kafka_queue_get_consumer(rk);
        rd_kafka_message_t *batch[10000];
        long messages = 0, bytes = 0;
        while (eofs < total && now() < deadline) {
                ssize_t n = rd_kafka_consume_batch_queue(queue, 200, batch, 10000);
                long before = messages;
                for (ssize_t i = 0; i < n; i++) {
                        rd_kafka_message_t *m = batch[i];
                        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                                for (int k = 0; k < total; k++)
                                        if (!at_eof[k] && parts->elems[k].partition == m->partition) {
                                                at_eof[k] = 1;
                                                eofs++;
                                        }
                        } else if (m->err) {
                                snprintf(last_error, sizeof(last_error), "%s",
                                         rd_kafka_message_errstr(m));
                        } else {
                                messages++;
                                bytes += m->len;
                        }
                        rd_kafka_message_destroy(m);
                }
                /* Only a batch with messages moves the clock: a partition's end is reported
                 * by the Fetch after its last messages, which the broker may hold for up to
                 * fetch.wait.max.ms waiting for new data (Kafka's long poll). */
                if (messages > before) {
                        last_t = now();
                        last_cpu = cpu_now();
                        if (!first_t) {
                                first_t = last_t;
                                first_cpu = last_cpu;
                        }
                }
        }
        printf("{\"messages\": %ld, \"bytes\": %ld, \"partitions\": %d, \"at_end\": %d, "
               "\"t0\": %.6f, \"t1\": %.6f, \"cpu\": %.4f, \"error\": \"%s\"}\n",
               messages, bytes, total, eofs, first_t, last_t, last_cpu - first_cpu, last_error);
        rd_kafka_queue_destroy(queue);
        rd_kafka_topic_partition_list_destroy(parts);
        free(at_eof);
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
        return eofs < total;
}

int main(int argc, char **argv) {
        if (argc < 2 || (strcmp(argv[1], "produce") && strcmp(argv[1], "consume")))
                die("usage: kbroker-loadgen produce|consume -b BOOTSTRAP -t TOPIC ...", NULL);
        int producing = !strcmp(argv[1], "produce");
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        const char *topic = NULL, *payload = NULL;
        long size = 0, count = 0;
        double timeout_s = 120;
        char errstr[512];
        int opt;
        optind = 2;
        while ((opt = getopt(argc, argv, "b:t:s:c:f:g:n:T:X:")) != -1) {
                switch (opt) {
                case 'b': if (rd_kafka_conf_set(conf, "bootstrap.servers", optarg, errstr, sizeof(errstr))) die(errstr, NULL); break;
                case 'g': if (rd_kafka_conf_set(conf, "group.id", optarg, errstr, sizeof(errstr))) die(errstr, NULL); break;
                case 't': topic = optarg; break;
                case 's': size = atol(optarg); break;
                case 'c': count = atol(optarg); break;
                case 'f': payload = optarg; break;
                case 'n': share = atoi(optarg); break;
                case 'T': timeout_s = atof(optarg); break;
                case 'X': set(conf, optarg); break;
                default: die("unknown option", NULL);
                }
        }
        if (!topic)
                die("-t TOPIC is required", NULL);
        if (producing) {
                if (!payload || size <= 0 || count <= 0)
                        die("produce needs -s SIZE, -c COUNT and -f PAYLOAD_FILE", NULL);
                return produce(conf, topic, size, count, payload, timeout_s);
        }
        if (share <= 0)
                die("consume needs -g GROUP and -n SHARE", NULL);
        return consume(conf, topic, timeout_s);
}
