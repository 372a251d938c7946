"""Hand-written site_rag questions over datasets/site (read by generate.py).

RAG rows: (lang, question, answer, doc date prefix, quote or [quotes], options).
A quote is copied verbatim from the post; generate.py finds it with
text.find(quote) (it must occur exactly once) and turns it into the gold span.
"OTHERPREFIX::quote" takes the quote from another post. Options: aliases,
tags (changed_fact: ask for the latest value, the gold is the later post;
dated: the question pins an older value that a later post changed;
paraphrase: worded differently from the passage).

ABSTAIN rows: (lang, question, reason) for questions the corpus cannot answer.
"""

CF = {"tags": ["changed_fact"]}
DATED = {"tags": ["dated"]}
PARA = {"tags": ["paraphrase"]}

RAG = [
    # 2023-12-01 xin chào (vi)
    ("vi", "Tính đến cuối tháng 11 năm 2023, HiveBook có bao nhiêu cơ sở kinh doanh trả phí?",
     418, "2023-12-01",
     "Tính đến cuối tháng 11 năm 2023, HiveBook có 418 cơ sở kinh doanh trả phí", DATED),
    ("en", "How much money goes into Tổ Ong Lab's shared lunch fund each month, in VND?",
     2500000, "2023-12-01", "quỹ ăn trưa chung là 2.500.000 đồng mỗi tháng", PARA),
    ("vi", "Mỗi người ở Tổ Ong Lab được chọn máy tính trong ngân sách bao nhiêu?",
     "45 triệu đồng", "2023-12-01",
     "ai cũng được chọn máy tính mình thích trong ngân sách 45 triệu đồng",
     {"aliases": ["45 triệu"]}),
    ("en", "Which web framework did the original HiveBook Python backend use?", "FastAPI",
     "2023-12-01", "Backend là một ứng dụng Python viết bằng FastAPI"),

    # 2024-01-10 why leave AWS (en)
    ("en", "What was HiveBook's AWS bill for December 2023, in US dollars?", 1180,
     "2024-01-10", "In December 2023 the bill came to USD 1,180"),
    ("vi", ("Trong hoá đơn AWS tháng 12/2023, chi phí truyền dữ liệu ra Internet là bao nhiêu "
     "đô la?"), 171, "2024-01-10", "| Data transfer out to the internet | 171 |"),
    ("en", ("What was the average ping from a Viettel 4G phone in Đà Nẵng to the MX-DN1 test "
     "server, in milliseconds?"), 9, "2024-01-10",
     "Ping from a Viettel 4G phone in Đà Nẵng to the MX-DN1 test server was 9 ms on average."),
    ("vi", "Nhóm quyết định rời AWS trong buổi họp kế hoạch ngày nào?", "8 January 2024",
     "2024-01-10", "We made the decision at our planning meeting on 8 January 2024.",
     {"aliases": ["8/1/2024", "8 tháng 1 năm 2024", "08/01/2024"]}),
    ("en", ("How long does it take to ride a motorbike from the office to the Mây Xanh data "
     "centre?"), "25 minutes", "2024-01-10", "25 minutes by motorbike from our office",
     {"aliases": ["25 phút"], "tags": ["paraphrase"]}),

    # 2024-02-26 migration to Mây Xanh (vi)
    ("vi", "Trong đêm chuyển sang Mây Xanh, dịch vụ được mở lại lúc mấy giờ?",
     "2 giờ 40 phút", "2024-02-26",
     "Thực tế chúng mình mở lại dịch vụ lúc 2 giờ 40 phút sáng Chủ nhật",
     {"aliases": ["2:40", "02:40", "2h40"]}),
    ("en", "How many gigabytes of images were copied from S3 to MinIO on the migration night?",
     61, "2024-02-26", "copy 61 GB ảnh từ S3 về MinIO trên mat-ong"),
    ("en", "What is the usable capacity of the backup server mat-ong, in TB?", 16, "2024-02-26",
     "Máy sao lưu mat-ong có bốn ổ HDD 8 TB chạy RAID 10, tức khoảng 16 TB dùng được."),
    ("vi", "Đêm chuyển nhà, nhóm đã kiểm tra số dòng trên bao nhiêu bảng?", 37, "2024-02-26",
     "chạy bộ kiểm tra số dòng trên 37 bảng"),
    ("vi", "Khi chuyển sang Mây Xanh vào tháng 2 năm 2024, máy ong-chua dùng CPU gì?",
     "AMD Ryzen 9 5950X", "2024-02-26",
     "| ong-chua | PostgreSQL chính | AMD Ryzen 9 5950X, 16 nhân | 32 GB | Ubuntu 22.04 LTS |",
     {"aliases": ["Ryzen 9 5950X", "5950X"], "tags": ["dated"]}),
    ("en", "Which private address range do the servers in MX-DN1 use to talk to each other?",
     "10.20.0.0/24", "2024-02-26",
     "Tất cả máy nói chuyện với nhau qua mạng riêng 10.20.0.0/24"),

    # 2024-03-12 reverse proxy (en)
    ("en", "How many requests per second did nginx handle in the March 2024 proxy benchmark?",
     18400, "2024-03-12", "| nginx | 1.24.0 | 18,400 | 12 ms | 71% |"),
    ("vi", ("Trong benchmark reverse proxy tháng 3/2024, HAProxy có độ trễ p99 bao nhiêu mili "
     "giây?"), 11, "2024-03-12", "| HAProxy | 2.8.5 | 19,100 | 11 ms | 66% |"),
    ("en", "What is worker_connections set to on cua-to after the fix?", 4096, "2024-03-12",
     "It is now 4096. Second, our health check was a TCP check"),
    ("en", "How many requests did the login rate limit block in its first week?", 2317,
     "2024-03-12", "In the first week the login limit blocked 2,317 requests"),
    ("vi", "Một ngày nhật ký truy cập sau khi Loki nén còn khoảng bao nhiêu MB?", 160,
     "2024-03-12", "Loki compresses it to roughly 160 MB."),
    ("vi", "Tháng 3 năm 2024, nhóm chọn phần mềm reverse proxy nào cho cua-to?", "nginx",
     "2024-03-12",
     ("So cua-to runs nginx 1.24.0 from the official nginx.org repository, with certbot for "
     "Let's Encrypt certificates."),
     {"aliases": ["nginx 1.24", "nginx 1.24.0"], "tags": ["dated"]}),

    # 2024-03-20 Gitea (vi)
    ("vi", "Gitea chạy ở cổng nào trên máy to-sap?", 3001, "2024-03-20",
     "| Gitea | 1.21.5 | 3001 (qua reverse proxy: git.toonglab.vn) |"),
    ("en", "How many Git repositories did Tổ Ong Lab host in Gitea in March 2024?", 38,
     "2024-03-20", "38 kho mã, trong đó kho chính là monorepo của HiveBook."),
    ("en", "How large is a full compressed Gitea backup, in GB?", 41, "2024-03-20",
     "Một bản sao lưu đầy đủ hiện khoảng 41 GB sau khi nén."),

    # 2024-03-28 Meilisearch (vi)
    ("vi", "Meilisearch mất bao lâu để tạo chỉ mục cho 1,2 triệu bản ghi?", "7 phút 40 giây",
     "2024-03-28", "| Meilisearch 1.6 | 7 phút 40 giây | 4,3 GB | 9 ms | 0,86 |",
     {"aliases": ["7 minutes 40 seconds", "7m40s"]}),
    ("en", ("What share of the 500 benchmark search queries were typed without diacritics, in "
     "percent?"), 62, "2024-03-28", "trong đó 62% là truy vấn không dấu"),
    ("en", "On which port does Meilisearch listen on ong-tho?", 7700, "2024-03-28",
     "chạy trên ong-tho ở cổng 7700"),
    ("vi", "Sau khi dùng Meilisearch, tỉ lệ tìm kiếm không có kết quả còn bao nhiêu phần trăm?",
     6, "2024-03-28", "Tỉ lệ tìm kiếm không có kết quả giảm từ 23% xuống 6%."),
    ("vi", "Yến đã thêm bao nhiêu cặp từ đồng nghĩa vào Meilisearch?", 140, "2024-03-28",
     "Mình thêm 140 cặp từ đồng nghĩa"),
    ("en", "What top-5 accuracy did Elasticsearch reach in the Vietnamese search comparison?",
     0.83, "2024-03-28", "| Elasticsearch 8.12 + ICU | 11 phút 5 giây | 2,6 GB | 21 ms | 0,83 |"),

    # 2024-04-15 Go rewrite (en)
    ("en", "What was the p95 latency of slot queries after the rewrite in Go, in ms?", 38,
     "2024-04-15", "| p95 latency, slot query | 180 ms | 38 ms |"),
    ("vi", "API đặt lịch viết bằng Go bắt đầu nhận toàn bộ lưu lượng vào ngày nào?",
     "8 April 2024", "2024-04-15", "The Go service went live for all traffic on 8 April 2024.",
     {"aliases": ["8/4/2024", "8 tháng 4 năm 2024"]}),
    ("en", "How big is the container image of the Go booking API, in MB?", 24, "2024-04-15",
     "| Container image size | 1.1 GB | 24 MB |"),
    ("vi", "Trong ba tuần chạy song song hai dịch vụ, nhóm tìm thấy bao nhiêu điểm khác biệt?",
     41, "2024-04-15", "We found 41 distinct differences."),
    ("en", "On which port does the Go booking API expose its Prometheus metrics?", 9102,
     "2024-04-15", "Prometheus metrics are exposed on a separate port, 9102."),
    ("vi", "Cơ chế nào trong cơ sở dữ liệu ngăn hai khách đặt trùng một khung giờ?",
     "exclusion constraint", "2024-04-15",
     ("Double bookings are now prevented in the database, not in application code: an "
     "exclusion constraint on the appointments table"),
     {"aliases": ["ràng buộc loại trừ"], "tags": ["paraphrase"]}),

    # 2024-04-30 disk full post-mortem (vi)
    ("vi", "Sự cố đầy ổ đĩa ngày 27/4/2024 làm HiveBook ngừng nhận lịch hẹn trong bao nhiêu phút?",
     47, "2024-04-30", "HiveBook ngừng nhận lịch hẹn mới trong 47 phút"),
    ("en", "How many bookings failed during the disk-full incident of April 2024?", 312,
     "2024-04-30", "312 lượt đặt lịch thất bại, khách nhận thông báo lỗi"),
    ("en", "How large had the pg_wal directory grown when ong-chua's disk filled up, in TB?",
     1.1, "2024-04-30", "thư mục pg_wal phình từ khoảng 2 GB lên 1,1 TB"),
    ("vi", "Cảnh báo dung lượng đĩa mức gọi điện thoại được đặt ở ngưỡng bao nhiêu phần trăm?",
     90, "2024-04-30", "cảnh báo gọi điện thoại ở 90%"),
    ("en", "How many salons did Hạnh phone personally after the disk-full incident?", 23,
     "2024-04-30", "Hạnh đã gọi điện cho 23 tiệm có nhiều lượt đặt lịch thất bại nhất"),

    # 2024-05-08 payments (en)
    ("en", "What fee does Ví Sen charge for a bank transfer by QR code, in percent?", 1.1,
     "2024-05-08", "bank transfer via QR code: 1.1% per transaction, minimum 1,100 VND;"),
    ("vi", "Ví Sen gửi lại một webhook tối đa bao nhiêu lần?", 8, "2024-05-08",
     "Ví Sen retries a webhook up to 8 times over 24 hours"),
    ("en", "What was the no-show rate for appointments with a deposit, in percent?", 1.9,
     "2024-05-08", "| No-show rate for appointments with a deposit | 1.9% |"),
    ("vi", "Số tiền đặt cọc trung bình là bao nhiêu đồng?", 142000, "2024-05-08",
     "The average deposit was 142,000 VND."),

    # 2024-05-22 second app server (en)
    ("en", "On what date did ong-tho-2 go into production?", "20 May 2024", "2024-05-22",
     "On 20 May 2024 we brought ong-tho-2 into production.",
     {"aliases": ["20/5/2024", "20 tháng 5 năm 2024"]}),
    ("vi", "Máy ong-tho-2 có bao nhiêu GB RAM?", 32, "2024-05-22",
     "so ong-tho-2 is an AMD Ryzen 7 7700 with 8 cores and 16 threads, 32 GB of DDR5 RAM"),
    ("en", "What is the monthly price of ong-tho-2 in VND?", 3400000, "2024-05-22",
     "ong-tho-2 costs 3,400,000 VND per month"),
    ("vi", "Trong thử nghiệm chặn cổng 8080 trên ong-tho, có bao nhiêu request bị lỗi 502?", 27,
     "2024-05-22", "27 requests in total got a 502"),

    # 2024-06-05 monitoring (vi)
    ("vi", "Prometheus trên ong-gac giữ dữ liệu trong bao nhiêu ngày?", 45, "2024-06-05",
     "Prometheus lấy số liệu mỗi 15 giây và giữ dữ liệu trong 45 ngày."),
    ("en", "Which port does Grafana listen on?", 3000, "2024-06-05", "| Grafana | 10.4 | 3000 |"),
    ("en", "How many alerting rules did Tổ Ong Lab have in June 2024?", 38, "2024-06-05",
     "Hiện có 38 luật cảnh báo, chia làm hai mức:"),
    ("vi", "Màn hình treo ở văn phòng để chiếu bảng điều khiển có giá bao nhiêu triệu đồng?",
     6.9, "2024-06-05", "khoản đầu tư 6,9 triệu đồng hiệu quả nhất năm"),
    ("en", "In June 2024, for how many days did Loki keep logs?", 14, "2024-06-05",
     "Loki giữ nhật ký 14 ngày.", DATED),

    # 2024-06-20 RAM upgrade (en)
    ("en", "How much RAM did ong-chua have after the June 2024 upgrade, in GB?", 64,
     "2024-06-20", "It now has 64 GB of RAM instead of 32 GB.", DATED),
    ("vi", "Sau khi nâng RAM ong-chua lên 64 GB, shared_buffers được đặt bao nhiêu GB?", 16,
     "2024-06-20", "| shared_buffers | 8 GB | 16 GB |", DATED),
    ("en", "How long did the nightly report job take after the memory upgrade, in minutes?",
     19, "2024-06-20", "| Nightly report job duration | 52 min | 19 min |"),
    ("vi", "PgBouncer lắng nghe ở cổng nào?", 6432, "2024-06-20",
     "PgBouncer, listening on port 6432, pools application connections"),
    ("en", ("What was the buffer cache hit ratio at peak after ong-chua got more memory, in "
     "percent?"), 99.4, "2024-06-20", "| Buffer cache hit ratio at peak | 96.5% | 99.4% |"),

    # 2024-07-03 restore drill (vi)
    ("vi", "Trong buổi diễn tập, khôi phục 412 GB dữ liệu cơ sở mất bao lâu?", "1 giờ 52 phút",
     "2024-07-03", "tức 1 giờ 52 phút cho 412 GB",
     {"aliases": ["1 hour 52 minutes", "1h52"]}),
    ("en", "How many monthly snapshots does the restic retention policy keep?", 12,
     "2024-07-03",
     ("Chính sách giữ bản sao lưu của restic là 7 bản hằng ngày, 4 bản hằng tuần và 12 bản "
     "hằng tháng.")),
    ("en", "What recovery time objective did the team set for a full restore, in hours?", 4,
     "2024-07-03", "Mục tiêu thời gian khôi phục (RTO) mà nhóm đặt ra là 4 giờ"),
    ("vi", "Ai là người thực hiện buổi diễn tập khôi phục tháng 6 năm 2024?", "Hoàng Anh Duy",
     "2024-07-03", "Người thực hiện là Hoàng Anh Duy", {"aliases": ["Duy"]}),
    ("en", "How much does the automated weekly restore test cost per week, in VND?", 180000,
     "2024-07-03", "Chi phí khoảng 180.000 đồng mỗi tuần cho máy thuê theo giờ."),

    # 2024-07-18 NFC/NFD (en)
    ("en", "What percentage of accented customer names were stored in NFD?", 3.7, "2024-07-18",
     "3.7% of customer names containing at least one accented letter were stored in NFD"),
    ("vi", "Lỗi NFC/NFD tạo ra bao nhiêu cặp khách hàng trùng lặp?", 2900, "2024-07-18",
     "We found 2,900 such duplicate pairs."),
    ("en", "How many rows did the NFC migration of 9 July 2024 rewrite?", 44800, "2024-07-18",
     "It touched 44,800 rows across 6 tables and ran in 4 minutes."),
    ("vi", "Chủ tiệm báo lỗi không tìm thấy khách hàng tên Ánh ở thành phố nào?", "Hội An",
     "2024-07-18", "In April a salon owner in Hội An sent us a support ticket",
     {"aliases": ["Hoi An"]}),

    # 2024-08-06 replica (vi)
    ("vi", "ong-chua-2 chính thức trở thành bản sao streaming vào ngày nào?",
     "31 tháng 7 năm 2024", "2024-08-06",
     "Ngày 31 tháng 7 năm 2024, lời hứa đó được thực hiện",
     {"aliases": ["31/7/2024", "31 July 2024"]}),
    ("en", "In the first failover test, how many seconds did promoting the replica take?", 38,
     "2024-08-06", "Riêng bước nâng bản sao lên máy chính mất 38 giây."),
    ("en", "What is the round-trip latency between the Đà Nẵng and Hà Nội data centres, in ms?",
     18, "2024-08-06", "Giữa MX-DN1 và MX-HN2 độ trễ khứ hồi là khoảng 18 ms.", PARA),
    ("vi", "max_slot_wal_keep_size được đặt bao nhiêu GB?", 200, "2024-08-06",
     "max_slot_wal_keep_size đặt ở 200 GB"),
    ("en", "What is the name of the Ansible playbook that promotes the database replica?",
     "promote-replica.yml", "2024-08-06",
     "người trực chạy một playbook Ansible tên promote-replica.yml",
     {"aliases": ["promote-replica"]}),

    # 2024-08-19 TLS post-mortem (en)
    ("en", "How long did the expired-certificate outage of 15 August 2024 last?",
     "2 hours and 5 minutes", "2024-08-19", "For 2 hours and 5 minutes, until 09:19",
     {"aliases": ["2 h 05 min", "2 giờ 5 phút", "125 minutes", "2 hours 5 minutes"]}),
    ("vi", "Certbot đã gia hạn thất bại tổng cộng bao nhiêu lần trước khi chứng chỉ hết hạn?",
     58, "2024-08-19", "certbot retries twice a day, 58 failed attempts in total."),
    ("en", "What discount on the August invoice did affected salons get, in percent?", 20,
     "2024-08-19", "Hạnh offered a 20% discount on the August invoice"),
    ("vi", ("Sau sự cố, cảnh báo mức cao (page) cho chứng chỉ sắp hết hạn được đặt ở bao nhiêu "
     "ngày?"), 7, "2024-08-19", ("The expiry alert thresholds are now: ticket at 21 days, page at "
     "7 days.")),

    # 2024-08-28 GPU server (vi)
    ("vi", "Máy ong-nghe được mua với giá bao nhiêu đồng?", 72500000, "2024-08-28",
     "Tổng chi phí mua máy là 72.500.000 đồng, mua ngày 12 tháng 8 năm 2024."),
    ("en", ("How many tokens per second does the 7B model generate on ong-nghe for a single "
     "request?"), 61, "2024-08-28", "Với một yêu cầu, mô hình sinh 61 token mỗi giây"),
    ("en", "Which graphics card is installed in ong-nghe?", "RTX 4090", "2024-08-28",
     "GPU: một card NVIDIA GeForce RTX 4090 với 24 GB VRAM",
     {"aliases": ["GeForce RTX 4090", "NVIDIA GeForce RTX 4090"]}),
    ("vi", "vLLM trên ong-nghe phục vụ ở cổng nào?", 8000, "2024-08-28",
     "chạy bằng vLLM 0.5.4 với giao diện tương thích OpenAI ở cổng 8000"),
    ("en", "How much per month did Mây Xanh quote for hosting the GPU machine, in VND?",
     2800000, "2024-08-28", "Mây Xanh báo giá đặt máy GPU là 2.800.000 đồng mỗi tháng"),

    # 2024-09-02 team update (en)
    ("en", "Since which date has Lê Thu Trang been engineering manager?", "1 September 2024",
     "2024-09-02", "Starting 1 September 2024, Lê Thu Trang is our engineering manager.",
     {"aliases": ["1/9/2024", "1 tháng 9 năm 2024"]}),
    ("vi", "Chương trình thực tập năm 2024 nhận được bao nhiêu hồ sơ?", 214, "2024-09-02",
     "We received 214 applications for the 2024 internship and took three interns."),
    ("en", "What is the new office rent per month?", "22 million VND", "2024-09-02",
     "Rent went from 14 million VND to 22 million VND per month.",
     {"aliases": ["22 triệu", "22,000,000", "22.000.000"]}),
    ("vi", "Phòng họp nhỏ ở văn phòng mới được đặt tên là gì?", "Sáp", "2024-09-02",
     'a small meeting room we named "Sáp" (beeswax)', {"aliases": ["beeswax"]}),
    ("en", "Who joined Tổ Ong Lab as its first dedicated QA engineer?", "Mai Linh Chi",
     "2024-09-02",
     "On 14 October 2024 Mai Linh Chi joins as our first dedicated QA engineer.",
     {"aliases": ["Chi"]}),

    # 2024-09-10 PostgreSQL 16 (vi)
    ("vi", ("Nâng cấp lên PostgreSQL 16 khiến hệ thống không ghi được dữ liệu trong bao nhiêu "
     "phút?"), 23, "2024-09-10",
     "Thời gian không ghi được dữ liệu là 23 phút, từ 23 giờ 02 đến 23 giờ 25."),
    ("en", "How many transactions per second did pgbench report on PostgreSQL 16.4?", 4870,
     "2024-09-10", "| Giao dịch mỗi giây (TPS) | 4.210 | 4.870 |"),
    ("en", "Which pg_upgrade option did the team use to avoid copying the data?", "--link",
     "2024-09-10", "Chúng mình chọn pg_upgrade --link trên ong-chua.",
     {"aliases": ["pg_upgrade --link", "link"]}),
    ("vi", "Trước khi nâng cấp, cơ sở dữ liệu chạy PostgreSQL phiên bản nào?", "14.12",
     "2024-09-10", "được nâng cấp từ PostgreSQL 14.12 lên PostgreSQL 16.4",
     {"aliases": ["PostgreSQL 14.12"], "tags": ["dated"]}),

    # 2024-09-25 RAG assistant (en)
    ("en", ("How many help-centre articles did the support assistant's knowledge base have in "
     "September 2024?"), 186, "2024-09-25", "The knowledge base is our help centre: 186 articles"),
    ("vi", "Mô hình bge-m3 (chỉ dense) đạt recall@5 bao nhiêu trên bộ 300 câu hỏi?", 0.81,
     "2024-09-25", "| bge-m3 (dense only) | 0.81 | 0.69 | 7 min |", DATED),
    ("en", "Which chunk size in tokens worked best for the support assistant?", 512,
     "2024-09-25", "512 tokens with an overlap of 64 tokens was best for us"),
    ("vi", ("Sau khi thêm một dòng hướng dẫn về ngôn ngữ, tỉ lệ trả lời sai ngôn ngữ còn bao "
     "nhiêu phần trăm?"), 2, "2024-09-25", "reduced wrong-language answers from 11% to 2%."),

    # 2024-10-08 CI (vi)
    ("vi", "Sau khi tối ưu, pipeline CI chính chạy trung bình mất bao lâu?", "4 phút 20 giây",
     "2024-10-08", "con số đó giờ là 4 phút 20 giây",
     {"aliases": ["4 minutes 20 seconds", "4m20s"]}),
    ("en", "What CPU does the CI runner ong-tho-ci have?", "Intel Core i7-12700", "2024-10-08",
     "Intel Core i7-12700, 12 nhân, 64 GB RAM, 1 TB NVMe",
     {"aliases": ["Core i7-12700", "i7-12700"]}),
    ("en", "How much does the dedicated CI runner cost per month, in VND?", 1900000,
     "2024-10-08", "1 TB NVMe, giá 1.900.000 đồng mỗi tháng"),
    ("vi", "Có bao nhiêu test chập chờn đang được theo dõi?", 7, "2024-10-08",
     "Có 7 test thỉnh thoảng thất bại ngẫu nhiên."),

    # 2024-10-21 on-call (en)
    ("en", "What was the weekly on-call stipend in 2024, in VND?", 1500000, "2024-10-21",
     "Each week on call earns a stipend of 1,500,000 VND, whether or not anything happens.",
     DATED),
    ("vi", "Hiện nay (từ năm 2025) phụ cấp trực sự cố mỗi tuần là bao nhiêu đồng?", 2000000,
     "2024-10-21",
     ["From 1 January 2025 the stipend goes up to 2,000,000 VND per week.",
      ("2025-01-06::Tăng phụ cấp trực sự cố lên 2.000.000 đồng mỗi tuần từ ngày 1 tháng 1 năm "
      "2025.")], CF),
    ("vi", ("Trong 22 tuần từ tháng 5 đến tháng 10 năm 2024 có tổng cộng bao nhiêu lần gọi "
     "cảnh báo (page)?"), 61, "2024-10-21", "| Pages in total | 61 |"),
    ("en", "What was the median time to acknowledge a page, in minutes?", 4, "2024-10-21",
     "| Median time to acknowledge | 4 min |"),
    ("en", "How many people are in the primary on-call rotation?", 5, "2024-10-21",
     "The rotation has five people:", {"aliases": ["five", "năm người"]}),

    # 2024-10-30 ong-gac upgrade (vi)
    ("vi", "Máy giám sát ong-gac được nâng cấp vào ngày nào?", "16 tháng 10 năm 2024",
     "2024-10-30", "Ngày 16 tháng 10 năm 2024, ong-gac được chuyển sang một VPS mới",
     {"aliases": ["16/10/2024", "16 October 2024"]}),
    ("en", "How much RAM does the monitoring server ong-gac have now, in GB?", 16, "2024-10-30",
     ["ong-gac được chuyển sang một VPS mới ở MX-DN1 với 4 vCPU, 16 GB RAM và 500 GB SSD.",
      "2025-04-02::| ong-gac | monitoring | Ubuntu 24.04 LTS | 4 vCPU | 16 GB |"], CF),
    ("en", "How many days are the reverse proxy's access logs kept in Loki now?", 30,
     "2024-10-30", "| Nhật ký truy cập của cua-to | 14 ngày | 30 ngày |", CF),
    ("vi", "Khi thử tắt Alertmanager, sau bao nhiêu phút thì có cuộc gọi cảnh báo?", 16,
     "2024-10-30", "Chúng mình thử bằng cách tắt Alertmanager: cuộc gọi đến sau 16 phút."),

    # 2024-11-05 SMS vs ZNS (vi)
    ("vi", "Mỗi tin Zalo ZNS nhắc lịch gửi thành công tốn bao nhiêu đồng?", 300, "2024-11-05",
     "chúng mình trả 300 đồng cho mỗi tin ZNS gửi thành công theo mẫu nhắc lịch"),
    ("en", "How much does one SMS brandname reminder cost HiveBook, in VND?", 750, "2024-11-05",
     "Giá SMS brandname chăm sóc khách hàng mà chúng mình trả là 750 đồng mỗi tin"),
    ("en", "What percentage of reminders were delivered through ZNS in October 2024?", 76,
     "2024-11-05", "| Gửi qua ZNS thành công | 0 | 201.000 (76%) |"),
    ("vi", "Có bao nhiêu tiệm bật tuỳ chọn \"Luôn gửi SMS\"?", 37, "2024-11-05",
     "Hiện có 37 tiệm bật tuỳ chọn đó."),
    ("en", "What did reminder messages cost in October 2024, in million VND?", 106.8,
     "2024-11-05", "Tổng cộng 106,8 triệu đồng"),

    # 2024-11-20 security review (en)
    ("en", "How many high-severity findings did the autumn 2024 security review report?", 3,
     "2024-11-20",
     "In total: 0 critical, 3 high, 7 medium, 12 low and 9 informational findings."),
    ("vi", "WireGuard lắng nghe ở cổng UDP nào?", 51820, "2024-11-20",
     "The WireGuard endpoint listens on UDP port 51820 on cua-to and on ong-gac"),
    ("en", "After the security review, how many days does an admin session last?", 14,
     "2024-11-20", "Admin sessions lasted 90 days. Now 14 days"),
    ("vi", "Lỗ hổng H2 (IDOR khi xuất lịch nhân viên) được sửa vào ngày nào?",
     "12 September 2024", "2024-11-20",
     "with a second tenant's IDs. Fixed on 12 September 2024.",
     {"aliases": ["12/9/2024", "12 tháng 9 năm 2024"]}),

    # 2024-11-28 WireGuard (en)
    ("en", "What MTU do the WireGuard tunnels use, in bytes?", 1380, "2024-11-28",
     "The MTU of the tunnels is 1380 bytes."),
    ("vi", "Cuối tháng 11 năm 2024 có bao nhiêu peer WireGuard?", 24, "2024-11-28",
     "At the end of November 2024 there are 24 peers"),
    ("en", "What is the private IP address of the backup server mat-ong?", "10.20.1.10",
     "2024-11-28", "| 10.20.1.0/24 | MX-HN2 (mat-ong is 10.20.1.10) |"),
    ("vi", "iperf3 đo được thông lượng bao nhiêu Mbit/s qua WireGuard giữa MX-DN1 và mat-ong?",
     870, "2024-11-28", "870 Mbit/s, against 940 Mbit/s without the tunnel"),

    # 2024-12-02 mobile app (vi)
    ("vi", "Sau khi tối ưu, ứng dụng Android có dung lượng tải về bao nhiêu MB?", 21,
     "2024-12-02", "Dung lượng tải về giảm từ 38 MB xuống 21 MB."),
    ("en", "What was the Android app's crash-free session rate in November 2024, in percent?",
     99.7, "2024-12-02", "| Tỉ lệ phiên không crash | 99,2% | 99,7% |"),
    ("en", "How much did the four low-end test phones cost in total, in million VND?", 9.6,
     "2024-12-02", "tổng cộng 9,6 triệu đồng"),
    ("vi", "Ứng dụng di động được nâng lên React Native phiên bản nào?", "0.75", "2024-12-02",
     "khi nâng cấp lên React Native 0.75", {"aliases": ["React Native 0.75"]}),

    # 2024-12-12 Redis post-mortem (en)
    ("en", "How many users were logged out by the Redis incident of 9 December 2024?", 1840,
     "2024-12-12", "1,840 users of the HiveBook admin app and mobile app were logged out"),
    ("vi", "Sau sự cố Redis, chính sách eviction được đổi thành gì?", "volatile-lru",
     "2024-12-12",
     "| Change eviction policy to volatile-lru, so only keys with an expiry can be evicted |"),
    ("en", "To what value did Khoa raise Redis maxmemory during the incident?", "6gb",
     "2024-12-12", "Khoa raises maxmemory to 6gb with CONFIG SET.",
     {"aliases": ["6 GB", "6GB"]}),

    # 2024-12-20 offsite (en)
    ("en", "How much did the Hội An offsite cost in total, in VND?", 38400000, "2024-12-20",
     "The total cost was 38,400,000 VND for nine people"),
    ("vi", "Trong buổi offsite, cả nhóm viết được bao nhiêu tờ giấy ghi chú?", 73, "2024-12-20",
     "We got 73 notes."),
    ("vi", "Ai phụ trách mục tiêu độ tin cậy của phần lõi năm 2025?", "Trang", "2024-12-20",
     ("no SEV-1 incident in 2025, and the database able to handle three times the 2024 peak. "
     "Owner: Trang."), {"aliases": ["Lê Thu Trang"]}),

    # 2025-01-06 year in review (vi)
    ("vi", "Cuối năm 2024, HiveBook có bao nhiêu cơ sở kinh doanh trả phí?", 1015, "2025-01-06",
     "Số cơ sở kinh doanh trả phí: 1.015, tăng từ 418 vào cuối tháng 11 năm 2023."),
    ("en", "How many bookings did HiveBook handle in December 2024?", 186000, "2025-01-06",
     "Lượt đặt lịch trong tháng 12 năm 2024: 186.000"),
    ("en", ("What was the booking API's availability in 2024, excluding planned maintenance, in "
     "percent?"), 99.96, "2025-01-06",
     "không tính các lần bảo trì có kế hoạch, là 99,96%."),
    ("vi", "Chi phí hạ tầng trả cho Mây Xanh trong tháng 12 năm 2024 là bao nhiêu đồng?",
     27950000, "2025-01-06",
     "Chi phí hạ tầng trả cho Mây Xanh tháng 12 năm 2024 là 27.950.000 đồng", DATED),
    ("en", "What share of the businesses using HiveBook are hair salons, in percent?", 48,
     "2025-01-06", "tiệm tóc chiếm 48%"),

    # 2025-01-17 Caddy (en)
    ("en", "Which reverse proxy software runs on cua-to today?", "Caddy", "2025-01-17",
     "as of 15 January 2025, cua-to runs Caddy 2.8.4", {"aliases": ["Caddy 2.8.4"],
                                                        "tags": ["changed_fact"]}),
    ("vi", ("Trong benchmark tháng 1 năm 2025, Caddy 2.8.4 xử lý được bao nhiêu request mỗi "
     "giây?"), 16900, "2025-01-17", "| Caddy | 2.8.4 | 16,900 | 14 ms | 81% |"),
    ("en", "About how many custom salon domains did HiveBook serve in January 2025?", 140,
     "2025-01-17", "We now serve about 140 custom salon domains, up from about 60 a year ago."),
    ("en", "How many lines long is the Caddyfile that replaced the nginx configuration?", 160,
     "2025-01-17", "The Caddyfile that replaces it is 160 lines."),
    ("vi", "Trong phút chuyển sang Caddy có bao nhiêu request thất bại?", 37, "2025-01-17",
     "Between 06:00 and 06:01 we counted 37 failed requests"),

    # 2025-01-27 Tết load test (vi)
    ("vi", "Giờ cao điểm thật trước Tết Ất Tỵ có bao nhiêu lượt đặt lịch?", 3450, "2025-01-27",
     "với 3.450 lượt đặt lịch trong một giờ"),
    ("en", "To what value was PgBouncer's default_pool_size raised before Tết 2025?", 40,
     "2025-01-27", "Tăng default_pool_size của PgBouncer từ 20 lên 40"),
    ("en", "In the second load-test run before Tết, what was the p95 latency in ms?", 210,
     "2025-01-27", "| Độ trễ p95 | 1,9 giây | 210 ms |"),
    ("vi", "Ai trực sự cố vào đêm giao thừa Tết Ất Tỵ?", "Khoa", "2025-01-27",
     "Người trực đêm giao thừa là Khoa", {"aliases": ["Trần Minh Khoa"]}),

    # 2025-02-10 time zone bug (en)
    ("en", "How many salons were hit by the reminder time zone bug?", 19, "2025-02-10",
     "We checked the other salons and found 19 affected businesses"),
    ("vi", "Lỗi múi giờ khiến bao nhiêu tin nhắc lịch bị gửi sai giờ?", 1270, "2025-02-10",
     "with 1,270 reminders sent at the wrong time"),
    ("en", "Which time zone did the new onboarding flow fall back to by mistake?", "UTC",
     "2025-02-10", 'the code fell back to "UTC" instead of "Asia/Ho_Chi_Minh"'),
    ("vi", "Phòng khám nha khoa phát hiện lỗi múi giờ nằm ở thành phố nào?", "Nha Trang",
     "2025-02-10", "a dental clinic in Nha Trang called our support line"),

    # 2025-02-24 table lock post-mortem (vi)
    ("vi", "Ngày 20/2/2025, bảng appointments bị khoá trong bao nhiêu phút?", 11, "2025-02-24",
     "Trong 11 phút đó, bảng appointments bị khoá"),
    ("en", "Roughly how many million rows did the appointments table have in February 2025?",
     41, "2025-02-24", "Bảng appointments lúc đó có khoảng 41 triệu dòng"),
    ("en", "What lock_timeout, in seconds, do automated migrations now set?", 5, "2025-02-24",
     "Phiên chạy migration tự động đặt lock_timeout 5 giây"),
    ("vi", "Có khoảng bao nhiêu lượt đặt lịch thất bại trong sự cố khoá bảng?", 640,
     "2025-02-24", "Khoảng 640 lượt đặt lịch thất bại."),

    # 2025-03-05 no Kubernetes (en)
    ("en", "How many containers ran in production in March 2025?", 14, "2025-03-05",
     "As of March 2025, we run 14 containers in production across ong-tho and ong-tho-2"),
    ("vi", "Dựng lại một máy chủ ứng dụng từ đầu bằng Ansible mất khoảng bao nhiêu phút?", 25,
     "2025-03-05", "Rebuilding an application server from scratch takes about 25 minutes."),
    ("en", "What is the average CPU usage of ong-tho-2, in percent?", 9, "2025-03-05",
     "ong-tho-2 averages 9% CPU."),
    ("vi", "Tổ Ong Lab dự kiến tuyển SRE thứ hai vào năm nào?", 2026, "2025-03-05",
     "we plan to hire one in 2026"),

    # 2025-03-20 new database hardware (vi)
    ("vi", "Hiện nay máy ong-chua có bao nhiêu GB RAM?", 128, "2025-03-20",
     "ong-chua là một máy hoàn toàn mới với CPU AMD EPYC 9124 và 128 GB RAM.", CF),
    ("en", "What CPU does the current PostgreSQL primary ong-chua use?", "AMD EPYC 9124",
     "2025-03-20", "ong-chua là một máy hoàn toàn mới với CPU AMD EPYC 9124",
     {"aliases": ["EPYC 9124"], "tags": ["changed_fact"]}),
    ("en", "How many seconds were writes unavailable during the 2025 database hardware switch?",
     52, "2025-03-20", "Thời gian không ghi được dữ liệu là 52 giây."),
    ("vi", "Hiện nay Tổ Ong Lab trả cho Mây Xanh bao nhiêu tiền hạ tầng mỗi tháng?", 30850000,
     "2025-03-20",
     "Tổng chi phí hạ tầng trả cho Mây Xanh vì vậy lên khoảng 30.850.000 đồng mỗi tháng", CF),
    ("en", "What is the monthly rent of the new ong-chua server, in VND?", 7800000, "2025-03-20",
     "| Giá thuê mỗi tháng | 4.900.000 đồng | 7.800.000 đồng |"),

    # 2025-03-28 session cookies (vi)
    ("vi", "Mỗi máy ứng dụng tải lại danh sách phiên bị thu hồi sau mỗi bao nhiêu giây?", 10,
     "2025-03-28", "Mỗi máy ứng dụng tải toàn bộ danh sách vào bộ nhớ mỗi 10 giây."),
    ("en", "How large is the new session cookie, in bytes?", 212, "2025-03-28",
     "Kích thước cookie là 212 byte"),
    ("en", "Which cipher encrypts and authenticates the session cookies?", "AES-256-GCM",
     "2025-03-28", "Mã hoá và xác thực bằng AES-256-GCM"),
    ("vi", ("Sau hai tuần chuyển đổi, bao nhiêu phần trăm phiên đang hoạt động đã sang dạng "
     "cookie mới?"), 96, "2025-03-28",
     "Sau hai tuần, 96% phiên đang hoạt động đã được chuyển sang dạng mới."),

    # 2025-04-02 OS upgrades (en)
    ("en", "Which operating system does the GPU machine ong-nghe run?", "Ubuntu 22.04",
     "2025-04-02",
     ("| ong-nghe | GPU, language models (office) | Ubuntu 22.04 LTS | AMD Ryzen 9 7950X, "
     "16 cores | 128 GB |"), {"aliases": ["Ubuntu 22.04 LTS", "22.04"]}),
    ("vi", "Đồng hồ trên cua-to bị lệch bao nhiêu giây sau khi dựng lại?", 1.8, "2025-04-02",
     "The clock drifted by 1.8 seconds in three days"),
    ("en", "How many seconds of connection errors did rebuilding cua-to cause?", 14,
     "2025-04-02", "that caused 14 seconds of connection errors"),
    ("vi", "Máy to-sap chạy hệ điều hành gì?", "Debian 12", "2025-04-02",
     "| to-sap | Gitea and Woodpecker server | Debian 12 | 2 vCPU | 4 GB |"),

    # 2025-04-10 support assistant, six months later (en)
    ("en", ("What is the support assistant's current recall@5 on the full 400-question "
     "evaluation set?"), 0.89, "2025-04-10",
     "On the full 400-question set, which is harder, from 0.84 to 0.89.", CF),
    ("vi", ("Sau khi cải tiến, mô hình từ chối trả lời bao nhiêu trong 40 câu hỏi không có đáp "
     "án?"), 34, "2025-04-10",
     "With both, the model abstained on 34 of the 40 unanswerable questions."),
    ("en", "Which reranker model does the support assistant use?", "bge-reranker-v2-m3",
     "2025-04-10", "A cross-encoder reranker, bge-reranker-v2-m3"),
    ("vi", "Thời gian phản hồi đầu tiên trung vị hiện nay là bao nhiêu phút?", 22, "2025-04-10",
     "| Median time to first response | 22 minutes |", CF),

    # 2025-04-15 internship 2025 (vi)
    ("vi", "Phụ cấp thực tập năm 2025 là bao nhiêu đồng mỗi tháng?", 7000000, "2025-04-15",
     "Phụ cấp tăng lên 7.000.000 đồng mỗi tháng."),
    ("en", "What is the application deadline for the 2025 internship?", "10 May 2025",
     "2025-04-15", "thuctap@toonglab.vn trước ngày 10 tháng 5 năm 2025",
     {"aliases": ["10/5/2025", "10 tháng 5 năm 2025"]}),
    # a head-count is a number: as text with "10" as an alias, any reply holding a 10 passed
    ("en", "How many people work at Tổ Ong Lab now?", 10, "2025-04-15",
     "Tổ Ong Lab hiện có mười người.", {"aliases": ["mười", "ten"], "tags": ["changed_fact"]}),
    ("vi", "Kỹ sư backend mới nhất, Trương Quang Vinh, gia nhập vào ngày nào?",
     "3 tháng 2 năm 2025", "2025-04-15",
     "Người mới nhất là Trương Quang Vinh, kỹ sư backend, gia nhập từ ngày 3 tháng 2 năm 2025.",
     {"aliases": ["3/2/2025", "3 February 2025"]}),
]

ABSTAIN = [
    # (lang, question, why the corpus cannot answer)
    ("en", "How much RAM does the server ong-tho-3 have?", "no_such_entity"),
    ("vi", "Máy ong-tho-3 có bao nhiêu RAM?", "no_such_entity"),
    ("en", "What is the Wi-Fi password of the Tổ Ong Lab office?", "not_stated"),
    ("vi", "Ngân sách marketing năm 2025 của Tổ Ong Lab là bao nhiêu?", "not_stated"),
    ("en", "What rating does the HiveBook iOS app have on the App Store?", "not_stated"),
    ("vi", "Phiên bản Redis đang chạy trên ong-tho là bao nhiêu?", "not_stated"),
    ("en", "How many employees does Mây Xanh Cloud have?", "not_stated"),
    ("vi", "Văn phòng chi nhánh Hà Nội của Tổ Ong Lab ở địa chỉ nào?", "no_such_entity"),
    ("en", "What is the p95 latency of the Python admin backend?", "not_stated"),
    ("vi", "Mây Xanh tính bao nhiêu tiền cho mỗi địa chỉ IP thêm?", "not_stated"),
    ("en", "What is the monthly subscription price of HiveBook for a hair salon?", "not_stated"),
    ("vi", "Giá gói HiveBook hằng tháng cho một tiệm spa là bao nhiêu?", "not_stated"),
    ("en", "What is the minimum Android version supported by the HiveBook app?", "not_stated"),
    ("vi", "Những thực tập sinh nào đã được nhận vào chương trình năm 2025?", "future"),
    ("en", "How long did the upgrade from PostgreSQL 16 to PostgreSQL 17 take?", "future"),
    ("vi", "ong-chua-2 được nâng cấp lên 128 GB RAM vào ngày nào?", "future"),
    ("en", "What was HiveBook's total AWS bill for the whole year 2023?", "not_stated"),
    ("vi", "Tổ Ong Lab dùng nhà cung cấp DNS nào cho hivebook.vn?", "not_stated"),
    ("en", "Which Kubernetes version does HiveBook run in production?", "false_premise"),
    ("vi", "Tổ Ong Lab đã tổ chức offsite ở Huế vào ngày nào?", "future"),
    ("en", "What is the name of Khoa's cat?", "not_stated"),
    ("vi", "Bao nhiêu khách hàng đã dùng trợ lý hỗ trợ bằng giọng nói của HiveBook?",
     "false_premise"),
    ("en", "How many bookings did HiveBook handle in March 2025?", "not_stated"),
    ("vi", "Hệ thống lưu điện (UPS) ở văn phòng là của hãng nào?", "not_stated"),
]


# Passages elsewhere in the corpus that restate a question's answer fact (found with
# `evalpipe validate`'s gold-completeness warnings): retrieving one of them is a hit.
# question id -> ["doc-prefix::quote", ...]; generate.py adds them to the gold passages.
MORE_GOLD = {
    "rag-010": ["2024-02-26::02:40: tắt trang bảo trì, mở lại dịch vụ."],
    "rag-014": ["2025-03-20::Bo mạch chủ dùng chip Ryzen 9 5950X không hỗ trợ quá 128 GB RAM",
                "2025-03-20::| CPU | AMD Ryzen 9 5950X, 16 nhân | AMD EPYC 9124, 16 nhân |"],
    "rag-015": ["2024-11-28::| 10.20.0.0/24 | MX-DN1 servers (Mây Xanh VLAN) |",
                "2024-11-28::These machines share a private VLAN provided by Mây Xanh, 10.20.0.0/24"],
    "rag-021": ["2024-02-26::vì sao chúng mình chọn nginx"],
    "rag-027": ["2024-05-22::| Meilisearch (port 7700) |"],
    "rag-031": ["2024-06-20::| Slot query p95 (end to end) | 38 ms | 24 ms |"],
    "rag-037": ["2025-01-06::lần ổ đĩa ong-chua đầy ngày 27 tháng 4 (47 phút không đặt lịch được)"],
    "rag-050": ["2024-10-30::Prometheus vẫn giữ số liệu 45 ngày."],
    "rag-055": ["2024-06-20::since 18 June 2024, ong-chua has 64 GB."],
    "rag-056": ["2025-03-20::| shared_buffers | 16 GB | 32 GB |"],
    "rag-063": ["2025-04-15::Duy thực hiện buổi diễn tập khôi phục dữ liệu chỉ sau ba tuần."],
    "rag-071": ["2024-11-28::About 760 km from Đà Nẵng, 18 ms round trip."],
    "rag-073": ["2025-03-20::Playbook promote-replica.yml, vốn viết cho tình huống khẩn cấp"],
    "rag-087": ["2024-09-02::## Welcome Mai Linh Chi, QA engineer",
                "2024-09-02::| Mai Linh Chi | QA engineer | 14 Oct 2024 |"],
    "rag-088": ["2025-01-06::nâng cấp PostgreSQL 16 ngày 7 tháng 9 (23 phút không ghi được)",
                "2024-09-10::Tổng thời gian không ghi được là 23 phút"],
    "rag-090": ["2024-09-10::**pg_upgrade với tuỳ chọn --link.** Không sao chép dữ liệu",
                "2024-09-10::23:06: chạy pg_upgrade --link."],
    "rag-091": ["2024-09-10::| Chỉ số | PostgreSQL 14.12 | PostgreSQL 16.4 |"],
    "rag-096": ["2024-10-08::| Thời gian trung bình pipeline chính | 14 phút 10 giây | 4 phút 20 giây |"],
    "rag-097": ["2025-04-02::| ong-tho-ci | CI runner | Ubuntu 24.04 LTS | Intel Core i7-12700, 12 cores"],
    "rag-101": ["2025-01-27::phụ cấp gấp đôi mức 2.000.000 đồng mỗi tuần"],
    "rag-104": ["2025-03-05::Five people in our rotation can do that today.",
                "2024-10-21::spread over five people"],
    "rag-105": ["2024-10-30::cách nâng cấp nó ngày 16 tháng 10 năm 2024"],
    "rag-109": ["2024-11-05::201.000 tin ZNS với giá 300 đồng"],
    "rag-122": ["2024-12-02::| Dung lượng tải về (Android) | 38 MB | 21 MB |"],
    "rag-137": ["2025-04-02::| cua-to | reverse proxy (Caddy 2.8.4) |"],
    "rag-144": ["2025-03-20::| Độ trễ p95 với 2.000 người dùng ảo | 210 ms | 120 ms |"],
    "rag-150": ["2025-04-15::một migration cơ sở dữ liệu khoá bảng lịch hẹn trong 11 phút"],
    "rag-153": ["2025-02-24::640 lượt đặt lịch thất bại, nhưng phần lớn khách đã thử lại thành công"],
    "rag-159": ["2025-04-02::| ong-chua | PostgreSQL 16 primary | Ubuntu 24.04 LTS | AMD EPYC 9124"],
    "rag-175": ["2025-04-15::| Phụ cấp mỗi tháng | 6.000.000 đồng | 7.000.000 đồng |"],
}
